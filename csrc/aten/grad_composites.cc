// Backward ops assembled from other tpu ops in C++ (their formulas, on whole tensors):
// unfold_backward, _cdist_backward, _pdist_backward, and _efficientzerotensor (autograd's
// known-zero gradients, made as plain zeros).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>

namespace tpu::aten {
namespace {

// unfold(dim, size, step) put window w's element k (input position w * step + k) at
// [.., w, .., k]: the gradient adds each window element back at its position.
at::Tensor k_unfold_backward(const at::Tensor& grad_in, c10::SymIntArrayRef input_sizes, int64_t dim, int64_t size,
                             int64_t step) {
  const std::vector<int64_t> sizes = C10_AS_INTARRAYREF_SLOW(input_sizes).vec();
  if (sizes.empty()) return grad_in.sum().reshape({});  // unfold of a 0-dim tensor: one window of one element
  dim = at::maybe_wrap_dim(dim, static_cast<int64_t>(sizes.size()));
  const int64_t windows = grad_in.size(dim);
  const auto index_options = grad_in.options().dtype(at::kLong);
  at::Tensor positions = (at::arange(windows, index_options) * step).unsqueeze(1) + at::arange(size, index_options);
  at::Tensor values = grad_in.movedim(-1, dim + 1).flatten(dim, dim + 1);
  return at::zeros(sizes, grad_in.options()).index_add_(dim, positions.reshape({-1}), values);
}

// d|x|_p / dx for the components `diff` of vectors whose p-norms are `dist` (broadcast over
// the last dim); 0 where the norm is 0, as in ATen.
at::Tensor norm_grad(const at::Tensor& diff, const at::Tensor& dist, double p) {
  const at::Tensor zero = at::zeros({}, diff.options());
  if (p == 0) return at::zeros_like(diff);
  if (p == 1) return diff.sign();
  if (std::isinf(p)) return diff.sign() * (diff.abs() == dist).to(diff.scalar_type());
  const at::Tensor safe = at::where(dist == 0, at::ones({}, dist.options()), dist);
  at::Tensor g = p == 2 ? diff / safe : diff.sign() * diff.abs().pow(p - 1) / safe.pow(p - 1);
  return at::where(dist == 0, zero, g);
}

at::Tensor k_cdist_backward(const at::Tensor& grad, const at::Tensor& x1, const at::Tensor& x2, double p,
                            const at::Tensor& cdist) {
  at::Tensor diff = x1.unsqueeze(-2) - x2.unsqueeze(-3);  // [..., P, R, M]
  // The gradient for x1 with the batch dims broadcast (autograd sums them back to x1's shape).
  return (grad.unsqueeze(-1) * norm_grad(diff, cdist.unsqueeze(-1), p)).sum(-2);
}

at::Tensor k_pdist_backward(const at::Tensor& grad, const at::Tensor& self, double p, const at::Tensor& pdist) {
  const int64_t n = self.size(0);
  if (n < 2) return at::zeros_like(self);
  // (i, j), i < j, in pdist's row-major order: they depend on n only, so they are made on the host.
  at::Tensor pairs = at::triu_indices(n, n, 1, at::TensorOptions().dtype(at::kLong)).to(self.device());
  at::Tensor i = pairs.select(0, 0), j = pairs.select(0, 1);
  at::Tensor diff = self.index_select(0, i) - self.index_select(0, j);
  at::Tensor part = grad.unsqueeze(-1) * norm_grad(diff, pdist.unsqueeze(-1), p);
  return at::zeros_like(self).index_add_(0, i, part).index_add_(0, j, part.neg());
}

at::Tensor k_efficientzerotensor(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                                 std::optional<bool> pin_memory) {
  return at::zeros_symint(size, at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("unfold_backward", k_unfold_backward);
  m.impl("_cdist_backward", k_cdist_backward);
  m.impl("_pdist_backward", k_pdist_backward);
  m.impl("_efficientzerotensor", k_efficientzerotensor);
}

}  // namespace
}  // namespace tpu::aten
