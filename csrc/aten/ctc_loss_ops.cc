// _ctc_loss and _ctc_loss_backward (int-list and tensor lengths) on the device. The lengths are
// checked on the host (as ATen's CPU kernel does) and travel into the program as one small
// [3, N] int64 tensor (input lengths, target lengths, target offsets), so batches of one shape
// share an executable whatever their lengths. Math: lowering/ctc_loss.cc.
#include <ATen/ops/tensor.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "aten/op_runner.h"
#include "aten/out_variants.h"

namespace tpu::aten {
namespace {

// The host-checked facts of one call.
struct CtcShape {
  at::Tensor lengths;  // [3, N] int64 on the device
  int64_t max_target = 0;
};

CtcShape check_ctc(const at::Tensor& log_probs, const at::Tensor& targets, at::IntArrayRef input_lengths,
                   at::IntArrayRef target_lengths, int64_t blank) {
  TORCH_CHECK(log_probs.scalar_type() == at::kFloat || log_probs.scalar_type() == at::kDouble,
              "\"ctc_loss\" not implemented for '", log_probs.scalar_type(), "'");
  TORCH_CHECK(log_probs.dim() == 3, "ctc_loss: expected log_probs to be 3-D (time, batch, classes), but got ",
              log_probs.dim(), "-D");
  TORCH_CHECK(at::isIntegralType(targets.scalar_type(), /*includeBool=*/false),
              "ctc_loss: targets must be integral, got ", targets.scalar_type());
  TORCH_CHECK(targets.dim() == 1 || targets.dim() == 2, "ctc_loss: targets must be 1-D (concatenated) or 2-D (batch, ",
              "max target length), got ", targets.dim(), "-D");
  const int64_t T = log_probs.size(0), N = log_probs.size(1), C = log_probs.size(2);
  TORCH_CHECK(blank >= 0 && blank < C, "blank must be in label range");
  TORCH_CHECK(static_cast<int64_t>(input_lengths.size()) == N, "input_lengths must be of size batch_size");
  TORCH_CHECK(static_cast<int64_t>(target_lengths.size()) == N, "target_lengths must be of size batch_size");
  std::vector<int64_t> rows(3 * N);
  int64_t offset = 0, max_target = 0;
  for (const auto b : c10::irange(N)) {
    const int64_t il = input_lengths[b], tl = target_lengths[b];
    TORCH_CHECK(il >= 0 && il <= T, "Expected input_lengths to have value at most ", T, ", but got value ", il,
                " (while checking arguments for ctc_loss)");
    TORCH_CHECK(tl >= 0, "Expected target_lengths to be non-negative, but got ", tl);
    rows[b] = il;
    rows[N + b] = tl;
    if (targets.dim() == 1) {
      rows[2 * N + b] = offset;
      offset += tl;
    } else {
      rows[2 * N + b] = b * targets.size(1);
      TORCH_CHECK(tl <= targets.size(1), "Expected tensor to have size at least ", tl, " at dimension 1, but got size ",
                  targets.size(1), " for argument #2 'targets' (while checking arguments for ctc_loss)");
    }
    max_target = std::max(max_target, tl);
  }
  if (targets.dim() == 1) {
    TORCH_CHECK(targets.size(0) >= offset, "Expected tensor to have size at least ", offset,
                " at dimension 0, but got size ", targets.size(0), " for argument #2 'targets' (while checking ",
                "arguments for ctc_loss)");
  } else {
    TORCH_CHECK(targets.size(0) == N, "Expected tensor to have size ", N, " at dimension 0, but got size ",
                targets.size(0), " for argument #2 'targets' (while checking arguments for ctc_loss)");
    max_target = targets.size(1);  // log_alpha's width follows the padded targets, as in ATen
  }
  CtcShape shape;
  shape.max_target = max_target;
  shape.lengths = at::tensor(rows, at::TensorOptions().dtype(at::kLong)).view({3, N}).to(log_probs.device());
  return shape;
}

std::vector<int64_t> host_lengths(const at::Tensor& lengths, const char* name) {
  TORCH_CHECK(at::isIntegralType(lengths.scalar_type(), /*includeBool=*/false), name, " must be integral");
  at::Tensor c = lengths.to(at::kCPU, at::kLong).contiguous().view({-1});
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

void add_common(OpRunner& r, const at::Tensor& log_probs, const at::Tensor& targets, const CtcShape& shape,
                int64_t blank) {
  const at::ScalarType t = log_probs.scalar_type();
  r.input(log_probs, t).input(targets.reshape({-1}), at::kLong).input(shape.lengths, at::kLong);
  r.attrs().set_int("blank", blank).set_int("max_target", shape.max_target);
}

std::tuple<at::Tensor, at::Tensor> k_ctc_loss(const at::Tensor& log_probs, const at::Tensor& targets,
                                              at::IntArrayRef input_lengths, at::IntArrayRef target_lengths,
                                              int64_t blank, bool /*zero_infinity: applied by ctc_loss*/) {
  CtcShape shape = check_ctc(log_probs, targets, input_lengths, target_lengths, blank);
  OpRunner r("ctc_loss", "aten::_ctc_loss");
  add_common(r, log_probs, targets, shape, blank);
  auto out = r.run(2);
  return {out[0], out[1]};
}

std::tuple<at::Tensor, at::Tensor> k_ctc_loss_tensor(const at::Tensor& log_probs, const at::Tensor& targets,
                                                     const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                                                     int64_t blank, bool zero_infinity) {
  return k_ctc_loss(log_probs, targets, host_lengths(input_lengths, "input_lengths"),
                    host_lengths(target_lengths, "target_lengths"), blank, zero_infinity);
}

at::Tensor k_ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                               at::IntArrayRef input_lengths, at::IntArrayRef target_lengths,
                               const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha, int64_t blank,
                               bool zero_infinity) {
  CtcShape shape = check_ctc(log_probs, targets, input_lengths, target_lengths, blank);
  const int64_t N = log_probs.size(1);
  TORCH_CHECK(log_alpha.dim() == 3 && log_alpha.size(0) == N && log_alpha.size(1) == log_probs.size(0) &&
                  log_alpha.size(2) == 2 * shape.max_target + 1,
              "ctc_loss_backward: log_alpha has shape ", log_alpha.sizes(), ", expected [", N, ", ",
              log_probs.size(0), ", ", 2 * shape.max_target + 1, "]");
  TORCH_CHECK(neg_log_likelihood.numel() == N, "ctc_loss_backward: neg_log_likelihood must have ", N, " elements");
  TORCH_CHECK(grad.numel() == N || grad.numel() == 1, "ctc_loss_backward: grad must have ", N, " elements");
  const at::ScalarType t = log_probs.scalar_type();
  OpRunner r("ctc_loss_backward", "aten::_ctc_loss_backward");
  r.input(grad.reshape({-1}), t);
  add_common(r, log_probs, targets, shape, blank);
  r.input(neg_log_likelihood.reshape({N}), t).input(log_alpha, t);
  r.attrs().set_bool("zero_infinity", zero_infinity);
  return r.run1();
}

at::Tensor k_ctc_loss_backward_tensor(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                      const at::Tensor& input_lengths, const at::Tensor& target_lengths,
                                      const at::Tensor& neg_log_likelihood, const at::Tensor& log_alpha,
                                      int64_t blank, bool zero_infinity) {
  return k_ctc_loss_backward(grad, log_probs, targets, host_lengths(input_lengths, "input_lengths"),
                             host_lengths(target_lengths, "target_lengths"), neg_log_likelihood, log_alpha, blank,
                             zero_infinity);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_ctc_loss", k_ctc_loss);
  m.impl("_ctc_loss.Tensor", k_ctc_loss_tensor);
  m.impl("_ctc_loss_backward", k_ctc_loss_backward);
  m.impl("_ctc_loss_backward.Tensor", k_ctc_loss_backward_tensor);
}

}  // namespace
}  // namespace tpu::aten
