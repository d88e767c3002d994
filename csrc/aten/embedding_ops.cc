// Embedding (PyTorch's composite, naming itself in index checks), its gradient, and EmbeddingBag (forward, dense backward, per-sample-weight backward).
#include <ATen/ops/embedding_native.h>
#include <torch/library.h>

#include "aten/index_checks.h"
#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

// PyTorch's own embedding (index_select of rows); an out-of-range index reports "embedding".
at::Tensor k_embedding(const at::Tensor& weight, const at::Tensor& indices, c10::SymInt padding_idx,
                       bool scale_grad_by_freq, bool sparse) {
  IndexCheckOpName name("embedding");
  return at::native::embedding_symint(weight, indices, std::move(padding_idx), scale_grad_by_freq, sparse);
}

at::Tensor k_embedding_dense_backward(const at::Tensor& grad, const at::Tensor& indices, int64_t num_weights,
                                      int64_t padding_idx, bool scale_grad_by_freq) {
  const at::ScalarType compute = accumulate_type(grad.scalar_type());
  OpRunner r("embedding_backward", "aten::embedding_dense_backward");
  r.input(grad, compute).input(indices, at::kLong);
  r.attrs().set_int("num_weights", num_weights).set_int("padding_idx", padding_idx).set_bool("scale_grad_by_freq", scale_grad_by_freq);
  return r.run1().to(grad.scalar_type());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> k_embedding_bag(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets, bool scale_grad_by_freq,
    int64_t mode, bool sparse, const std::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
    int64_t padding_idx) {
  TORCH_CHECK(indices.dim() == 1, "input has to be a 1D Tensor, but got Tensor of dimension ", indices.dim());
  TORCH_CHECK(offsets.dim() == 1, "offsets has to be a 1D Tensor, but got Tensor of dimension ", offsets.dim());
  TORCH_CHECK(!given(per_sample_weights) || mode == 0,
              "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for mode='sum'");
  const int64_t bags = offsets.size(0) - (include_last_offset ? 1 : 0);
  TORCH_CHECK(bags >= 0, "embedding_bag: offsets must have at least one element with include_last_offset=True");
  const at::ScalarType compute = accumulate_type(weight.scalar_type());
  OpRunner r("embedding_bag", "aten::_embedding_bag");
  r.input(weight, compute).input(indices, at::kLong).input(offsets, at::kLong);
  if (given(per_sample_weights)) r.input(*per_sample_weights, compute);
  r.attrs().set_int("mode", mode).set_int("bags", bags).set_int("padding_idx", padding_idx).set_bool("has_psw", given(per_sample_weights));
  auto out = r.run(4);
  return {out[0].to(weight.scalar_type()), out[1], out[2], out[3]};
}

at::Tensor k_embedding_bag_dense_backward(const at::Tensor& grad, const at::Tensor& indices,
                                          const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                          const at::Tensor& maximum_indices, int64_t num_weights,
                                          bool scale_grad_by_freq, int64_t mode,
                                          const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx) {
  OpRunner r("embedding_bag_backward", "aten::_embedding_bag_dense_backward");
  r.input(grad).input(indices, at::kLong).input(offset2bag, at::kLong).input(bag_size, at::kLong);
  r.input(maximum_indices, at::kLong);
  if (given(per_sample_weights)) r.input(*per_sample_weights, grad.scalar_type());
  r.attrs().set_int("num_weights", num_weights).set_int("mode", mode).set_int("padding_idx", padding_idx);
  r.attrs().set_bool("has_psw", given(per_sample_weights)).set_bool("scale_grad_by_freq", scale_grad_by_freq);
  return r.run1();
}

at::Tensor k_embedding_bag_psw_backward(const at::Tensor& grad, const at::Tensor& weight, const at::Tensor& indices,
                                        const at::Tensor& offsets, const at::Tensor& offset2bag, int64_t mode,
                                        int64_t padding_idx) {
  TORCH_CHECK(mode == 0, "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  OpRunner r("embedding_bag_psw_backward", "aten::_embedding_bag_per_sample_weights_backward");
  r.input(grad).input(weight, grad.scalar_type()).input(indices, at::kLong).input(offset2bag, at::kLong);
  r.attrs().set_int("padding_idx", padding_idx);
  return r.run1();
}

at::Tensor k_embedding_bag_backward(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& offsets,
                                    const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                    const at::Tensor& maximum_indices, int64_t num_weights, bool scale_grad_by_freq,
                                    int64_t mode, bool sparse, const std::optional<at::Tensor>& per_sample_weights,
                                    int64_t padding_idx) {
  TORCH_CHECK(!sparse, "tpu does not support sparse gradients for EmbeddingBag. Fix: use sparse=False");
  return k_embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                        scale_grad_by_freq, mode, per_sample_weights, padding_idx);
}

at::Tensor& k_embedding_renorm_(at::Tensor& self, const at::Tensor& indices, double max_norm, double norm_type) {
  TORCH_CHECK(self.dim() == 2, "embedding_renorm_(): input must be 2-D");
  OpRunner r("embedding_renorm", "aten::embedding_renorm_");
  r.input(self).input(indices, at::kLong);
  r.attrs().set_float("max_norm", max_norm).set_float("norm_type", norm_type);
  r.run_into(self);
  return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("embedding", k_embedding);
  m.impl("embedding_renorm_", k_embedding_renorm_);
  m.impl("_embedding_bag_backward", k_embedding_bag_backward);
  m.impl("embedding_dense_backward", k_embedding_dense_backward);
  m.impl("_embedding_bag", k_embedding_bag);
  m.impl("_embedding_bag_forward_only", k_embedding_bag);
  m.impl("_embedding_bag_dense_backward", k_embedding_bag_dense_backward);
  m.impl("_embedding_bag_per_sample_weights_backward", k_embedding_bag_psw_backward);
}

}  // namespace
}  // namespace tpu::aten
