// Convolutions, pooling, adaptive pooling and upsampling.
#include <ATen/native/ConvUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cstring>

#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "aten/precision_policy.h"
#include "aten/tensor_access.h"
#include "host_aten/conv_kernel.h"
#include "runtime/runtime.h"

namespace tpu::aten {
namespace {

using Dims = std::vector<int64_t>;

// A per-spatial-dim parameter list; a single value applies to every dim.
Dims expand_param(at::IntArrayRef v, size_t n, int64_t fallback) {
  if (v.empty()) return Dims(n, fallback);
  if (v.size() == 1) return Dims(n, v[0]);
  TORCH_CHECK(v.size() == n, "expected ", n, " values, got ", v.size());
  return Dims(v.begin(), v.end());
}

// ---- convolution -------------------------------------------------------------------------

void conv_attrs(OpRunner& r, size_t n, at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                bool transposed, at::IntArrayRef output_padding, int64_t groups) {
  r.attrs().set_ints("stride", expand_param(stride, n, 1)).set_ints("padding", expand_param(padding, n, 0));
  r.attrs().set_ints("dilation", expand_param(dilation, n, 1)).set_bool("transposed", transposed);
  r.attrs().set_ints("output_padding", expand_param(output_padding, n, 0)).set_int("groups", groups);
}

// On the XLA CPU plugin a large float32/float64 convolution runs ATen's CPU kernel from inside the
// program (host_aten/conv_kernel.h), marked here so the choice is part of the op's key in every
// mode. Small ones keep XLA's convolution: ATen's threads, waking for each call and spinning after
// it beside XLA's own, cost more than the faster kernel saves (measured on the zoo's models,
// docs/performance.md). A precision override (tf32, torch.tpu.precision) keeps XLA's convolution,
// which honours it.
void mark_host_conv(OpRunner& r, const at::Tensor& x, const at::Tensor& w, const at::Tensor* grad_y,
                    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed) {
  const at::ScalarType dtype = x.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble) return;
  if (r.attrs().has("tf32") || r.attrs().has("precision")) return;
  if (x.numel() == 0 || w.numel() == 0 || (grad_y != nullptr && grad_y->numel() == 0)) return;
  if (!runtime::Runtime::get().has_host_kernel(host_aten::kConv)) return;
  // Multiply-adds: every weight meets each position of the plain convolution's output (the
  // gradient's, or a transposed convolution's input).
  const size_t n = static_cast<size_t>(w.dim() - 2);
  const std::vector<int64_t> sizes =
      transposed ? x.sizes().vec()
      : grad_y != nullptr ? grad_y->sizes().vec()
                          : at::native::conv_output_size(x.sizes(), w.sizes(), expand_param(padding, n, 0),
                                                         expand_param(stride, n, 1), expand_param(dilation, n, 1));
  double positions = static_cast<double>(x.size(0));
  for (size_t i = 0; i < n; ++i) positions *= static_cast<double>(std::max<int64_t>(sizes[2 + i], 0));
  if (positions * static_cast<double>(w.numel()) < host_aten::host_conv_min_macs()) return;
  r.attrs().set_bool("host_kernel", true);
}

at::Tensor k_convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                         at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                         at::IntArrayRef output_padding, int64_t groups) {
  const bool unbatched = input.dim() == weight.dim() - 1;
  const at::Tensor x = unbatched ? input.unsqueeze(0) : input;
  const size_t n = static_cast<size_t>(weight.dim() - 2);
  OpRunner r("convolution", "aten::convolution");
  r.input(x).input(weight, x.scalar_type());
  if (bias.has_value() && bias->defined()) r.input(*bias, x.scalar_type());
  conv_attrs(r, n, stride, padding, dilation, transposed, output_padding, groups);
  mark_conv_precision(r, x.scalar_type());
  mark_host_conv(r, x, weight, nullptr, stride, padding, dilation, transposed);
  at::Tensor out = r.run1();
  return unbatched ? out.squeeze(0) : out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  const size_t n = static_cast<size_t>(weight.dim() - 2);
  const bool unbatched = input.dim() == weight.dim() - 1;
  const at::Tensor g = unbatched ? grad_output.unsqueeze(0) : grad_output;
  const at::Tensor x = unbatched ? input.unsqueeze(0) : input;
  OpRunner r("convolution_backward", "aten::convolution_backward");
  r.input(g).input(x, g.scalar_type()).input(weight, g.scalar_type());
  conv_attrs(r, n, stride, padding, dilation, transposed, output_padding, groups);
  r.attrs().set_ints("output_mask", {output_mask[0], output_mask[1], output_mask[2]});
  mark_conv_precision(r, g.scalar_type());
  mark_host_conv(r, x, weight, &g, stride, padding, dilation, transposed);
  const size_t count = output_mask[0] + output_mask[1] + output_mask[2];
  auto outs = r.run(count);
  std::array<at::Tensor, 3> grads;
  size_t next = 0;
  for (size_t i = 0; i < 3; ++i) if (output_mask[i]) grads[i] = outs[next++];
  if (unbatched && grads[0].defined()) grads[0] = grads[0].squeeze(0);
  return {grads[0], grads[1], grads[2]};
}

// ---- pooling -------------------------------------------------------------------------------

struct Pool {
  size_t n;
  Dims kernel, stride, padding, dilation;
};

Pool pool_params(size_t n, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                 at::IntArrayRef dilation) {
  Pool p{n, expand_param(kernel, n, 1), {}, expand_param(padding, n, 0), expand_param(dilation, n, 1)};
  p.stride = stride.empty() ? p.kernel : expand_param(stride, n, 1);
  for (size_t i = 0; i < n; ++i) {
    TORCH_CHECK(p.kernel[i] > 0 && p.stride[i] > 0 && p.dilation[i] > 0,
                "pooling: kernel_size, stride and dilation must be greater than zero");
    TORCH_CHECK(p.padding[i] >= 0 && p.padding[i] <= p.kernel[i] / 2,
                "pad should be at most half of effective kernel size, but got pad=", p.padding[i],
                ", kernel_size=", p.kernel[i]);
  }
  return p;
}

void pool_attrs(OpRunner& r, const Pool& p, bool ceil_mode) {
  r.attrs().set_int("spatial", static_cast<int64_t>(p.n)).set_ints("kernel", p.kernel).set_ints("stride", p.stride);
  r.attrs().set_ints("padding", p.padding).set_ints("dilation", p.dilation).set_bool("ceil_mode", ceil_mode);
}

std::tuple<at::Tensor, at::Tensor> max_pool(const at::Tensor& self, size_t n, at::IntArrayRef kernel,
                                            at::IntArrayRef stride, at::IntArrayRef padding,
                                            at::IntArrayRef dilation, bool ceil_mode) {
  OpRunner r("max_pool", n == 2 ? "aten::max_pool2d" : "aten::max_pool3d");
  r.input(self);
  pool_attrs(r, pool_params(n, kernel, stride, padding, dilation), ceil_mode);
  auto out = r.run(2);
  return {out[0], out[1]};
}

std::tuple<at::Tensor&, at::Tensor&> k_max_pool2d_out(const at::Tensor& self, at::IntArrayRef kernel,
                                                      at::IntArrayRef stride, at::IntArrayRef padding,
                                                      at::IntArrayRef dilation, bool ceil_mode, at::Tensor& out,
                                                      at::Tensor& indices) {
  auto [v, i] = max_pool(self, 2, kernel, stride, padding, dilation, ceil_mode);
  write_out(v, out);
  write_out(i, indices);
  return {out, indices};
}

std::tuple<at::Tensor, at::Tensor> k_max_pool3d(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                                                at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  return max_pool(self, 3, kernel, stride, padding, dilation, ceil_mode);
}

at::Tensor max_pool_backward(const at::Tensor& grad, const at::Tensor& self, size_t n, const at::Tensor& indices) {
  OpRunner r("max_pool_backward", "aten::max_pool_backward");
  r.input(grad).input(self).input(indices, at::kLong);
  r.attrs().set_int("spatial", static_cast<int64_t>(n));
  return r.run1();
}

at::Tensor& k_max_pool2d_backward_out(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef, at::IntArrayRef,
                                      at::IntArrayRef, at::IntArrayRef, bool, const at::Tensor& indices,
                                      at::Tensor& grad_input) {
  return write_out(max_pool_backward(grad, self, 2, indices), grad_input);
}

at::Tensor k_max_pool3d_backward(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef, at::IntArrayRef,
                                 at::IntArrayRef, at::IntArrayRef, bool, const at::Tensor& indices) {
  return max_pool_backward(grad, self, 3, indices);
}

at::Tensor avg_pool(const at::Tensor& self, size_t n, at::IntArrayRef kernel, at::IntArrayRef stride,
                    at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                    std::optional<int64_t> divisor_override) {
  TORCH_CHECK(!divisor_override.has_value() || *divisor_override != 0, "divisor must be not zero");
  OpRunner r("avg_pool", n == 2 ? "aten::avg_pool2d" : "aten::avg_pool3d");
  r.input(self);
  pool_attrs(r, pool_params(n, kernel, stride, padding, {}), ceil_mode);
  r.attrs().set_bool("count_include_pad", count_include_pad).set_int("divisor_override", divisor_override.value_or(0));
  return r.run1();
}

at::Tensor avg_pool_backward(const at::Tensor& grad, const at::Tensor& self, size_t n, at::IntArrayRef kernel,
                             at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                             bool count_include_pad, std::optional<int64_t> divisor_override) {
  OpRunner r("avg_pool_backward", "aten::avg_pool_backward");
  r.input(grad).input(self, grad.scalar_type());
  pool_attrs(r, pool_params(n, kernel, stride, padding, {}), ceil_mode);
  r.attrs().set_bool("count_include_pad", count_include_pad).set_int("divisor_override", divisor_override.value_or(0));
  return r.run1();
}

at::Tensor& k_avg_pool2d_out(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                             at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                             std::optional<int64_t> divisor_override, at::Tensor& out) {
  return write_out(avg_pool(self, 2, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override), out);
}
at::Tensor& k_avg_pool3d_out(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                             at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                             std::optional<int64_t> divisor_override, at::Tensor& out) {
  return write_out(avg_pool(self, 3, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override), out);
}
at::Tensor& k_avg_pool2d_backward_out(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef kernel,
                                      at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                                      bool count_include_pad, std::optional<int64_t> divisor_override,
                                      at::Tensor& grad_input) {
  return write_out(
      avg_pool_backward(grad, self, 2, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override),
      grad_input);
}
at::Tensor& k_avg_pool3d_backward_out(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef kernel,
                                      at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                                      bool count_include_pad, std::optional<int64_t> divisor_override,
                                      at::Tensor& grad_input) {
  return write_out(
      avg_pool_backward(grad, self, 3, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override),
      grad_input);
}

// ---- adaptive average pooling --------------------------------------------------------------

at::Tensor adaptive_avg_pool(const at::Tensor& self, at::IntArrayRef output_size) {
  for (int64_t i = 1; i < self.dim(); ++i) {
    TORCH_CHECK(self.size(i) > 0, "adaptive_avg_pool: expected input to have non-zero size for non-batch dimensions");
  }
  OpRunner r("adaptive_avg_pool", "aten::adaptive_avg_pool");
  r.input(self).attrs().set_ints("output_size", Dims(output_size.begin(), output_size.end()));
  return r.run1();
}
at::Tensor adaptive_avg_pool_backward(const at::Tensor& grad, const at::Tensor& self, int64_t n) {
  OpRunner r("adaptive_avg_pool_backward", "aten::adaptive_avg_pool_backward");
  r.input(grad).input(self, grad.scalar_type()).attrs().set_int("spatial", n);
  return r.run1();
}
at::Tensor k_adaptive_avg_pool2d(const at::Tensor& self, at::IntArrayRef output_size) {
  return adaptive_avg_pool(self, output_size);
}
at::Tensor k_adaptive_avg_pool2d_backward(const at::Tensor& grad, const at::Tensor& self) {
  return adaptive_avg_pool_backward(grad, self, 2);
}
at::Tensor& k_adaptive_avg_pool3d_out(const at::Tensor& self, at::IntArrayRef output_size, at::Tensor& out) {
  return write_out(adaptive_avg_pool(self, output_size), out);
}
at::Tensor k_adaptive_avg_pool3d_backward(const at::Tensor& grad, const at::Tensor& self) {
  return adaptive_avg_pool_backward(grad, self, 3);
}

// ---- upsampling ----------------------------------------------------------------------------

int64_t bits_of(std::optional<double> scale) {
  const double v = scale.value_or(0.0);
  int64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

at::Tensor upsample(const at::Tensor& self, const char* mode, at::IntArrayRef output_size, bool align_corners,
                    std::vector<std::optional<double>> scales) {
  Dims bits;
  for (const auto& s : scales) bits.push_back(bits_of(s));
  OpRunner r("upsample", "aten::upsample");
  r.input(self);
  r.attrs().set_string("mode", mode).set_ints("output_size", Dims(output_size.begin(), output_size.end()));
  r.attrs().set_bool("align_corners", align_corners).set_ints("scales", bits);
  return r.run1();
}

at::Tensor upsample_backward(const at::Tensor& grad, const char* mode, at::IntArrayRef input_size, bool align_corners,
                             std::vector<std::optional<double>> scales) {
  Dims bits;
  for (const auto& s : scales) bits.push_back(bits_of(s));
  OpRunner r("upsample_backward", "aten::upsample_backward");
  r.input(grad);
  r.attrs().set_string("mode", mode).set_ints("input_size", Dims(input_size.begin(), input_size.end()));
  r.attrs().set_bool("align_corners", align_corners).set_ints("scales", bits);
  return r.run1();
}

at::Tensor& k_nearest1d_out(const at::Tensor& self, at::IntArrayRef o, std::optional<double> s, at::Tensor& out) {
  return write_out(upsample(self, "nearest", o, false, {s}), out);
}
at::Tensor& k_nearest2d_out(const at::Tensor& self, at::IntArrayRef o, std::optional<double> sh,
                            std::optional<double> sw, at::Tensor& out) {
  return write_out(upsample(self, "nearest", o, false, {sh, sw}), out);
}
at::Tensor& k_nearest3d_out(const at::Tensor& self, at::IntArrayRef o, std::optional<double> sd,
                            std::optional<double> sh, std::optional<double> sw, at::Tensor& out) {
  return write_out(upsample(self, "nearest", o, false, {sd, sh, sw}), out);
}
at::Tensor& k_nearest_exact1d_out(const at::Tensor& self, at::IntArrayRef o, std::optional<double> s, at::Tensor& out) {
  return write_out(upsample(self, "nearest_exact", o, false, {s}), out);
}
at::Tensor& k_nearest_exact2d_out(const at::Tensor& self, at::IntArrayRef o, std::optional<double> sh,
                                  std::optional<double> sw, at::Tensor& out) {
  return write_out(upsample(self, "nearest_exact", o, false, {sh, sw}), out);
}
at::Tensor& k_nearest_exact3d_out(const at::Tensor& self, at::IntArrayRef o, std::optional<double> sd,
                                  std::optional<double> sh, std::optional<double> sw, at::Tensor& out) {
  return write_out(upsample(self, "nearest_exact", o, false, {sd, sh, sw}), out);
}
at::Tensor& k_linear1d_out(const at::Tensor& self, at::IntArrayRef o, bool ac, std::optional<double> s, at::Tensor& out) {
  return write_out(upsample(self, "linear", o, ac, {s}), out);
}
at::Tensor& k_bilinear2d_out(const at::Tensor& self, at::IntArrayRef o, bool ac, std::optional<double> sh,
                             std::optional<double> sw, at::Tensor& out) {
  return write_out(upsample(self, "linear", o, ac, {sh, sw}), out);
}
at::Tensor& k_trilinear3d_out(const at::Tensor& self, at::IntArrayRef o, bool ac, std::optional<double> sd,
                              std::optional<double> sh, std::optional<double> sw, at::Tensor& out) {
  return write_out(upsample(self, "linear", o, ac, {sd, sh, sw}), out);
}
at::Tensor& k_bicubic2d_out(const at::Tensor& self, at::IntArrayRef o, bool ac, std::optional<double> sh,
                            std::optional<double> sw, at::Tensor& out) {
  return write_out(upsample(self, "cubic", o, ac, {sh, sw}), out);
}

at::Tensor& k_nearest1d_bw(const at::Tensor& g, at::IntArrayRef, at::IntArrayRef in, std::optional<double> s,
                           at::Tensor& gi) {
  return write_out(upsample_backward(g, "nearest", in, false, {s}), gi);
}
at::Tensor& k_nearest2d_bw(const at::Tensor& g, at::IntArrayRef, at::IntArrayRef in, std::optional<double> sh,
                           std::optional<double> sw, at::Tensor& gi) {
  return write_out(upsample_backward(g, "nearest", in, false, {sh, sw}), gi);
}
at::Tensor& k_nearest3d_bw(const at::Tensor& g, at::IntArrayRef, at::IntArrayRef in, std::optional<double> sd,
                           std::optional<double> sh, std::optional<double> sw, at::Tensor& gi) {
  return write_out(upsample_backward(g, "nearest", in, false, {sd, sh, sw}), gi);
}
at::Tensor& k_nearest_exact1d_bw(const at::Tensor& g, at::IntArrayRef, at::IntArrayRef in, std::optional<double> s,
                                 at::Tensor& gi) {
  return write_out(upsample_backward(g, "nearest_exact", in, false, {s}), gi);
}
at::Tensor& k_nearest_exact2d_bw(const at::Tensor& g, at::IntArrayRef, at::IntArrayRef in, std::optional<double> sh,
                                 std::optional<double> sw, at::Tensor& gi) {
  return write_out(upsample_backward(g, "nearest_exact", in, false, {sh, sw}), gi);
}
at::Tensor& k_nearest_exact3d_bw(const at::Tensor& g, at::IntArrayRef, at::IntArrayRef in, std::optional<double> sd,
                                 std::optional<double> sh, std::optional<double> sw, at::Tensor& gi) {
  return write_out(upsample_backward(g, "nearest_exact", in, false, {sd, sh, sw}), gi);
}
at::Tensor& k_linear1d_bw(const at::Tensor& g, at::IntArrayRef, at::IntArrayRef in, bool ac, std::optional<double> s,
                          at::Tensor& gi) {
  return write_out(upsample_backward(g, "linear", in, ac, {s}), gi);
}
at::Tensor& k_bilinear2d_bw(const at::Tensor& g, at::IntArrayRef, at::IntArrayRef in, bool ac,
                            std::optional<double> sh, std::optional<double> sw, at::Tensor& gi) {
  return write_out(upsample_backward(g, "linear", in, ac, {sh, sw}), gi);
}
at::Tensor& k_trilinear3d_bw(const at::Tensor& g, at::IntArrayRef, at::IntArrayRef in, bool ac,
                             std::optional<double> sd, std::optional<double> sh, std::optional<double> sw,
                             at::Tensor& gi) {
  return write_out(upsample_backward(g, "linear", in, ac, {sd, sh, sw}), gi);
}
at::Tensor& k_bicubic2d_bw(const at::Tensor& g, at::IntArrayRef, at::IntArrayRef in, bool ac,
                           std::optional<double> sh, std::optional<double> sw, at::Tensor& gi) {
  return write_out(upsample_backward(g, "cubic", in, ac, {sh, sw}), gi);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", k_convolution);
  m.impl("convolution_backward_overrideable", k_convolution_backward);
  m.impl("max_pool2d_with_indices.out", k_max_pool2d_out);
  m.impl("max_pool2d_with_indices_backward.grad_input", k_max_pool2d_backward_out);
  m.impl("max_pool3d_with_indices", k_max_pool3d);
  m.impl("max_pool3d_with_indices_backward", k_max_pool3d_backward);
  m.impl("avg_pool2d.out", k_avg_pool2d_out);
  m.impl("avg_pool3d.out", k_avg_pool3d_out);
  m.impl("avg_pool2d_backward.grad_input", k_avg_pool2d_backward_out);
  m.impl("avg_pool3d_backward.grad_input", k_avg_pool3d_backward_out);
  m.impl("_adaptive_avg_pool2d", k_adaptive_avg_pool2d);
  m.impl("_adaptive_avg_pool2d_backward", k_adaptive_avg_pool2d_backward);
  m.impl("adaptive_avg_pool3d.out", k_adaptive_avg_pool3d_out);
  m.impl("_adaptive_avg_pool3d", adaptive_avg_pool);
  m.impl("_adaptive_avg_pool3d_backward", k_adaptive_avg_pool3d_backward);
  m.impl("upsample_nearest1d.out", k_nearest1d_out);
  m.impl("upsample_nearest2d.out", k_nearest2d_out);
  m.impl("upsample_nearest3d.out", k_nearest3d_out);
  m.impl("_upsample_nearest_exact1d.out", k_nearest_exact1d_out);
  m.impl("_upsample_nearest_exact2d.out", k_nearest_exact2d_out);
  m.impl("_upsample_nearest_exact3d.out", k_nearest_exact3d_out);
  m.impl("upsample_linear1d.out", k_linear1d_out);
  m.impl("upsample_bilinear2d.out", k_bilinear2d_out);
  m.impl("upsample_trilinear3d.out", k_trilinear3d_out);
  m.impl("upsample_bicubic2d.out", k_bicubic2d_out);
  m.impl("upsample_nearest1d_backward.grad_input", k_nearest1d_bw);
  m.impl("upsample_nearest2d_backward.grad_input", k_nearest2d_bw);
  m.impl("upsample_nearest3d_backward.grad_input", k_nearest3d_bw);
  m.impl("_upsample_nearest_exact1d_backward.grad_input", k_nearest_exact1d_bw);
  m.impl("_upsample_nearest_exact2d_backward.grad_input", k_nearest_exact2d_bw);
  m.impl("_upsample_nearest_exact3d_backward.grad_input", k_nearest_exact3d_bw);
  m.impl("upsample_linear1d_backward.grad_input", k_linear1d_bw);
  m.impl("upsample_bilinear2d_backward.grad_input", k_bilinear2d_bw);
  m.impl("upsample_trilinear3d_backward.grad_input", k_trilinear3d_bw);
  m.impl("upsample_bicubic2d_backward.grad_input", k_bicubic2d_bw);
}

}  // namespace
}  // namespace tpu::aten
