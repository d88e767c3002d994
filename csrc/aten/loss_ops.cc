// Loss functions: nll_loss (1d, 2d), mse, binary cross entropy, smooth L1, Huber, soft margin.
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "aten/tensor_access.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

std::tuple<at::Tensor, at::Tensor> nll_loss(const at::Tensor& self, const at::Tensor& target,
                                            const std::optional<at::Tensor>& weight, int64_t reduction,
                                            int64_t ignore_index, const char* label) {
  TORCH_CHECK(self.dim() > 0 && self.dim() != 3, label, ": input tensor should be 1D, 2D or 4D");
  TORCH_CHECK(target.scalar_type() == at::kLong || target.scalar_type() == at::kByte,
              "expected scalar type Long but found ", target.scalar_type());
  const int64_t classes = self.size(self.dim() == 1 ? 0 : 1);
  TORCH_CHECK(!given(weight) || weight->numel() == classes, "weight tensor should be defined either for all ",
              classes, " classes or no classes but got weight tensor of shape: ", weight->sizes());
  const at::ScalarType compute = accumulate_type(self.scalar_type());
  OpRunner r("nll_loss", label);
  r.input(self, compute).input(target, at::kLong);
  if (given(weight)) r.input(*weight, compute);
  r.attrs().set_int("reduction", reduction).set_int("ignore_index", ignore_index).set_bool("has_weight", given(weight));
  auto out = r.run(2);
  return {out[0].to(self.scalar_type()), out[1].to(self.scalar_type())};
}

at::Tensor nll_loss_grad(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                         const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                         const at::Tensor& total_weight, const char* label) {
  const at::ScalarType compute = accumulate_type(self.scalar_type());
  OpRunner r("nll_loss_backward", label);
  r.input(grad, compute).input(self, compute).input(target, at::kLong);
  if (given(weight)) r.input(*weight, compute);
  r.input(total_weight, compute);
  r.attrs().set_int("reduction", reduction).set_int("ignore_index", ignore_index).set_bool("has_weight", given(weight));
  return r.run1().to(self.scalar_type());
}

std::tuple<at::Tensor&, at::Tensor&> k_nll_loss_out(const at::Tensor& self, const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                                    int64_t ignore_index, at::Tensor& output, at::Tensor& total) {
  auto [o, t] = nll_loss(self, target, weight, reduction, ignore_index, "aten::nll_loss");
  write_out(o, output);
  write_out(t, total);
  return {output, total};
}
at::Tensor& k_nll_loss_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                    const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                                    const at::Tensor& total_weight, at::Tensor& grad_input) {
  return write_out(nll_loss_grad(grad, self, target, weight, reduction, ignore_index, total_weight,
                                 "aten::nll_loss_backward"), grad_input);
}
std::tuple<at::Tensor, at::Tensor> k_nll_loss2d(const at::Tensor& self, const at::Tensor& target,
                                                const std::optional<at::Tensor>& weight, int64_t reduction,
                                                int64_t ignore_index) {
  return nll_loss(self, target, weight, reduction, ignore_index, "aten::nll_loss2d");
}
at::Tensor k_nll_loss2d_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                 const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                                 const at::Tensor& total_weight) {
  return nll_loss_grad(grad, self, target, weight, reduction, ignore_index, total_weight, "aten::nll_loss2d_backward");
}

// Losses of (self, target) with a reduction and optional float attributes.
at::Tensor pair_loss(const char* lowering, const char* label, const at::Tensor& self, const at::Tensor& target,
                     int64_t reduction, const char* key = nullptr, double value = 0,
                     const std::optional<at::Tensor>& weight = std::nullopt) {
  const at::ScalarType t = promote(self, target);
  OpRunner r(lowering, label);
  r.input(self, t).input(target, t);
  if (given(weight)) r.input(*weight, t);
  r.attrs().set_int("reduction", reduction);
  if (key != nullptr) r.attrs().set_float(key, value);
  return r.run1();
}

at::Tensor pair_loss_grad(const char* lowering, const char* label, const at::Tensor& grad, const at::Tensor& self,
                          const at::Tensor& target, int64_t reduction, const char* key = nullptr, double value = 0,
                          const std::optional<at::Tensor>& weight = std::nullopt) {
  const at::ScalarType t = promote(self, target);
  OpRunner r(lowering, label);
  r.input(grad, t).input(self, t).input(target, t);
  if (given(weight)) r.input(*weight, t);
  r.attrs().set_int("reduction", reduction);
  if (key != nullptr) r.attrs().set_float(key, value);
  return r.run1();
}

at::Tensor& k_mse_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, at::Tensor& out) {
  return write_out(pair_loss("mse_loss", "aten::mse_loss", self, target, reduction), out);
}
at::Tensor k_mse_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  return pair_loss_grad("mse_loss_backward", "aten::mse_loss_backward", grad, self, target, reduction);
}
at::Tensor& k_mse_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                               int64_t reduction, at::Tensor& out) {
  return write_out(k_mse_backward(grad, self, target, reduction), out);
}

at::Tensor k_bce(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                 int64_t reduction) {
  return pair_loss("binary_cross_entropy", "aten::binary_cross_entropy", self, target, reduction, nullptr, 0, weight);
}
at::Tensor& k_bce_out(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
                      int64_t reduction, at::Tensor& out) {
  return write_out(k_bce(self, target, weight, reduction), out);
}
at::Tensor k_bce_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                          const std::optional<at::Tensor>& weight, int64_t reduction) {
  return pair_loss_grad("binary_cross_entropy_backward", "aten::binary_cross_entropy_backward", grad, self, target,
                        reduction, nullptr, 0, weight);
}
at::Tensor& k_bce_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight, int64_t reduction, at::Tensor& out) {
  return write_out(k_bce_backward(grad, self, target, weight, reduction), out);
}

at::Tensor& k_smooth_l1_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta,
                            at::Tensor& out) {
  TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
  return write_out(pair_loss("smooth_l1_loss", "aten::smooth_l1_loss", self, target, reduction, "beta", beta), out);
}
at::Tensor& k_smooth_l1_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                     int64_t reduction, double beta, at::Tensor& out) {
  return write_out(pair_loss_grad("smooth_l1_loss_backward", "aten::smooth_l1_loss_backward", grad, self, target,
                                  reduction, "beta", beta), out);
}
at::Tensor& k_huber_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta,
                        at::Tensor& out) {
  TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
  return write_out(pair_loss("huber_loss", "aten::huber_loss", self, target, reduction, "delta", delta), out);
}
at::Tensor k_huber(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta) {
  TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
  return pair_loss("huber_loss", "aten::huber_loss", self, target, reduction, "delta", delta);
}
at::Tensor& k_huber_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                 int64_t reduction, double delta, at::Tensor& out) {
  return write_out(pair_loss_grad("huber_loss_backward", "aten::huber_loss_backward", grad, self, target, reduction,
                                  "delta", delta), out);
}
at::Tensor& k_soft_margin_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, at::Tensor& out) {
  return write_out(pair_loss("soft_margin_loss", "aten::soft_margin_loss", self, target, reduction), out);
}
at::Tensor& k_soft_margin_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                       int64_t reduction, at::Tensor& out) {
  return write_out(pair_loss_grad("soft_margin_loss_backward", "aten::soft_margin_loss_backward", grad, self, target,
                                  reduction), out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nll_loss_forward.output", k_nll_loss_out);
  m.impl("nll_loss_backward.grad_input", k_nll_loss_backward_out);
  m.impl("nll_loss2d_forward", k_nll_loss2d);
  m.impl("nll_loss2d_backward", k_nll_loss2d_backward);
  m.impl("mse_loss.out", k_mse_out);
  m.impl("mse_loss_backward", k_mse_backward);
  m.impl("mse_loss_backward.grad_input", k_mse_backward_out);
  m.impl("binary_cross_entropy", k_bce);
  m.impl("binary_cross_entropy.out", k_bce_out);
  m.impl("binary_cross_entropy_backward", k_bce_backward);
  m.impl("binary_cross_entropy_backward.grad_input", k_bce_backward_out);
  m.impl("smooth_l1_loss.out", k_smooth_l1_out);
  m.impl("smooth_l1_loss_backward.grad_input", k_smooth_l1_backward_out);
  m.impl("huber_loss.out", k_huber_out);
  m.impl("huber_loss", k_huber);
  m.impl("huber_loss_backward.out", k_huber_backward_out);
  m.impl("soft_margin_loss.out", k_soft_margin_out);
  m.impl("soft_margin_loss_backward.grad_input", k_soft_margin_backward_out);
}

}  // namespace
}  // namespace tpu::aten
