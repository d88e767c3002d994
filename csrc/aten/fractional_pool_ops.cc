// fractional_max_pool2d / 3d and their backwards on the device. The forward lowering lives in
// lowering/fractional_pool.cc; the backward reuses max_pool_backward (scatter-add by indices).
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <string>

#include "aten/op_runner.h"
#include "aten/out_variants.h"

namespace tpu::aten {
namespace {

using Dims = std::vector<int64_t>;

template <size_t N>
const char* label() {
  return N == 2 ? "fractional_max_pool2d()" : "fractional_max_pool3d()";
}

// The CPU kernel's checks, so bad input raises the same kind of message instead of reading
// outside the input. Returns the batched shape of the output.
template <size_t N>
Dims check_forward(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef output_size,
                   const at::Tensor& samples) {
  const int64_t n = static_cast<int64_t>(N);
  TORCH_CHECK(kernel.size() == N, label<N>(), ": kernel_size must either be a single Int or tuple of ", N, " Ints");
  TORCH_CHECK(output_size.size() == N, label<N>(), ": output_size must either be a single Int or tuple of ", N,
              " Ints");
  TORCH_CHECK(self.dim() == n + 1 || self.dim() == n + 2, label<N>(), ": Expected ", n + 1, "D or ", n + 2,
              "D tensor, but got: ", self.sizes());
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), label<N>(), ": expected a floating point input, got ",
              self.scalar_type());
  for (int64_t i = 1; i < self.dim(); ++i) {
    TORCH_CHECK(self.size(i) > 0, label<N>(), ": Expected input to have non-zero size for non-batch dimensions, but got",
                self.sizes(), " with dimension ", i, " being empty.");
  }
  const int64_t lead = self.dim() - n;
  static const char* const names2[] = {"height", "width"};
  static const char* const names3[] = {"time", "height", "width"};
  for (size_t i = 0; i < N; ++i) {
    const char* name = N == 2 ? names2[i] : names3[i];
    TORCH_CHECK(kernel[i] > 0, label<N>(), ": kernel_size must be greater than zero, got ", kernel);
    TORCH_CHECK(output_size[i] >= 0, label<N>(), ": output_size must be non-negative, got ", output_size);
    TORCH_CHECK(output_size[i] + kernel[i] - 1 <= self.size(lead + static_cast<int64_t>(i)), label<N>(), ": pool ", name,
                " ", kernel[i], " too large relative to input ", name, " ", self.size(lead + static_cast<int64_t>(i)));
  }
  const int64_t batch = self.dim() == n + 2 ? self.size(0) : 1;
  const int64_t planes = self.size(lead - 1);
  TORCH_CHECK(samples.defined() && samples.device() == self.device(), label<N>(),
              ": random_samples must be a tensor on the input's device (", self.device(), ")");
  // Like the CPU kernel, only the first batch * planes * n samples (row-major) are read: module
  // tests reuse a batched sample tensor for unbatched input.
  TORCH_CHECK(samples.numel() >= batch * planes * n, label<N>(), ": expected at least ", batch * planes * n,
              " random_samples (shape [", batch, ", ", planes, ", ", n, "]), got ", samples.sizes());
  Dims out{batch, planes};
  out.insert(out.end(), output_size.begin(), output_size.end());
  return out;
}

template <size_t N>
std::tuple<at::Tensor, at::Tensor> fractional_forward(const at::Tensor& self, at::IntArrayRef kernel,
                                                      at::IntArrayRef output_size, const at::Tensor& samples) {
  const Dims out_shape = check_forward<N>(self, kernel, output_size, samples);
  const bool batched = self.dim() == static_cast<int64_t>(N) + 2;
  const at::Tensor x = batched ? self : self.unsqueeze(0);
  at::Tensor values, indices;
  int64_t count = 1;
  for (int64_t d : out_shape) count *= d;
  if (count == 0) {  // empty batch or zero output size: nothing to compute
    values = at::empty(out_shape, self.options());
    indices = at::empty(out_shape, self.options().dtype(at::kLong));
  } else {
    OpRunner r("fractional_max_pool", N == 2 ? "aten::fractional_max_pool2d" : "aten::fractional_max_pool3d");
    const at::Tensor used = samples.reshape({-1}).narrow(0, 0, out_shape[0] * out_shape[1] * N);
    r.input(x).input(used.view({out_shape[0], out_shape[1], static_cast<int64_t>(N)}), x.scalar_type());
    r.attrs().set_ints("kernel", Dims(kernel.begin(), kernel.end()));
    r.attrs().set_ints("output_size", Dims(output_size.begin(), output_size.end()));
    // PyTorch's 2d samples are (w, h); the 3d ones (t, h, w).
    r.attrs().set_ints("sample_cols", N == 2 ? Dims{1, 0} : Dims{0, 1, 2});
    auto outs = r.run(2);
    values = outs[0];
    indices = outs[1];
  }
  if (!batched) return {values.squeeze(0), indices.squeeze(0)};
  return {values, indices};
}

template <size_t N>
std::tuple<at::Tensor, at::Tensor> k_fractional(const at::Tensor& self, at::IntArrayRef kernel,
                                                at::IntArrayRef output_size, const at::Tensor& samples) {
  return fractional_forward<N>(self, kernel, output_size, samples);
}

template <size_t N>
std::tuple<at::Tensor&, at::Tensor&> k_fractional_out(const at::Tensor& self, at::IntArrayRef kernel,
                                                      at::IntArrayRef output_size, const at::Tensor& samples,
                                                      at::Tensor& output, at::Tensor& indices) {
  auto [v, i] = fractional_forward<N>(self, kernel, output_size, samples);
  write_out(v, output);
  write_out(i, indices);
  return {output, indices};
}

template <size_t N>
at::Tensor fractional_backward(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef output_size,
                               const at::Tensor& indices) {
  const int64_t n = static_cast<int64_t>(N);
  const char* name = N == 2 ? "fractional_max_pool2d_backward()" : "fractional_max_pool3d_backward()";
  TORCH_CHECK(output_size.size() == N, name, ": output_size must have ", n, " elements, got ", output_size);
  TORCH_CHECK(self.dim() == n + 1 || self.dim() == n + 2, name, ": Expected ", n + 1, "D or ", n + 2,
              "D input, got ", self.sizes());
  TORCH_CHECK(grad.dim() == self.dim(), name, ": gradOutput must have the input's rank, got ", grad.sizes());
  for (int64_t i = 0; i < self.dim() - n; ++i) {
    TORCH_CHECK(grad.size(i) == self.size(i), name, ": gradOutput ", grad.sizes(), " does not match input ",
                self.sizes());
  }
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(grad.size(self.dim() - n + i) == output_size[i], name, ": gradOutput ", grad.sizes(),
                " does not match output_size ", output_size);
  }
  TORCH_CHECK(indices.sizes() == grad.sizes(), name, ": indices ", indices.sizes(), " must match gradOutput ",
              grad.sizes());
  if (grad.numel() == 0 || self.numel() == 0) return at::zeros(self.sizes(), grad.options());
  OpRunner r("max_pool_backward", N == 2 ? "aten::fractional_max_pool2d_backward" : "aten::fractional_max_pool3d_backward");
  r.input(grad).input(self, grad.scalar_type()).input(indices, at::kLong);
  r.attrs().set_int("spatial", n);
  return r.run1();
}

template <size_t N>
at::Tensor k_fractional_backward(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef,
                                 at::IntArrayRef output_size, const at::Tensor& indices) {
  return fractional_backward<N>(grad, self, output_size, indices);
}

template <size_t N>
at::Tensor& k_fractional_backward_out(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef,
                                      at::IntArrayRef output_size, const at::Tensor& indices,
                                      at::Tensor& grad_input) {
  return write_out(fractional_backward<N>(grad, self, output_size, indices), grad_input);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("fractional_max_pool2d", k_fractional<2>);
  m.impl("fractional_max_pool2d.output", k_fractional_out<2>);
  m.impl("fractional_max_pool3d", k_fractional<3>);
  m.impl("fractional_max_pool3d.output", k_fractional_out<3>);
  m.impl("fractional_max_pool2d_backward", k_fractional_backward<2>);
  m.impl("fractional_max_pool2d_backward.grad_input", k_fractional_backward_out<2>);
  m.impl("fractional_max_pool3d_backward", k_fractional_backward<3>);
  m.impl("fractional_max_pool3d_backward.grad_input", k_fractional_backward_out<3>);
}

}  // namespace
}  // namespace tpu::aten
