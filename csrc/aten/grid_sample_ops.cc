// grid_sampler_2d / grid_sampler_3d and antialiased bilinear upsampling, assembled from
// other tpu ops (gather, where, matmul) so they run on the device without CPU fallback.
// The kernels are also registered at AutogradPrivateUse1: autograd then records the
// composition, which gives the backward (input and grid gradients) without separate
// *_backward kernels (which are provided too, for direct calls).
#include <array>
#include <cmath>
#include <optional>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/library.h>

#include "aten/out_variants.h"

namespace tpu::aten {
namespace {

enum Interp : int64_t { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding : int64_t { kZeros = 0, kBorder = 1, kReflection = 2 };

// Grid coordinate in [-1, 1] -> pixel coordinate.
at::Tensor unnormalize(const at::Tensor& c, int64_t size, bool align) {
  return align ? (c + 1) / 2 * static_cast<double>(size - 1) : ((c + 1) * static_cast<double>(size) - 1) / 2;
}

// Mirror `c` into [twice_low/2, twice_high/2] (ATen's reflection rule).
at::Tensor reflect(const at::Tensor& c, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return at::zeros_like(c);
  const double lo = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
  at::Tensor in = (c - lo).abs();
  at::Tensor extra = at::fmod(in, span);
  at::Tensor even = at::fmod(at::floor(in / span), 2) == 0;
  return at::where(even, extra + lo, (span - extra) + lo);
}

at::Tensor apply_padding(const at::Tensor& c, int64_t size, int64_t padding, bool align) {
  if (padding == kBorder) return c.clamp(0, static_cast<double>(size - 1));
  if (padding == kReflection) {
    at::Tensor r = align ? reflect(c, 0, 2 * (size - 1)) : reflect(c, -1, 2 * size - 1);
    return r.clamp(0, static_cast<double>(size - 1));
  }
  return c;
}

// Integral-valued float coordinate -> long index; clamped first so inf/huge values stay
// out of bounds without overflowing the conversion.
at::Tensor to_index(const at::Tensor& f, int64_t size) {
  return f.clamp(-4, static_cast<double>(size + 3)).to(at::kLong);
}

// flat: (N, C, P); idx[k]: (N, L) long index into spatial dim k (outermost first).
// Returns (N, C, L); taps outside the input read as zero.
at::Tensor gather_taps(const at::Tensor& flat, at::IntArrayRef spatial, const std::vector<at::Tensor>& idx) {
  at::Tensor valid, linear;
  for (size_t k = 0; k < idx.size(); ++k) {
    at::Tensor ok = (idx[k] >= 0) & (idx[k] < spatial[k]);
    at::Tensor clamped = idx[k].clamp(0, spatial[k] - 1);
    valid = valid.defined() ? (valid & ok) : ok;
    linear = linear.defined() ? linear * spatial[k] + clamped : clamped;
  }
  const int64_t n = flat.size(0), c = flat.size(1), l = linear.size(1);
  at::Tensor taps = at::gather(flat, 2, linear.unsqueeze(1).expand({n, c, l}));
  return at::where(valid.unsqueeze(1), taps, at::zeros({}, taps.options()));
}

// Keys's cubic convolution weights (A = -0.75), as in ATen's upsample/grid_sample.
at::Tensor cubic_near(const at::Tensor& x) {  // |x| <= 1
  constexpr double A = -0.75;
  return ((A + 2) * x - (A + 3)) * x * x + 1;
}
at::Tensor cubic_far(const at::Tensor& x) {  // 1 < |x| < 2
  constexpr double A = -0.75;
  return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}
std::vector<at::Tensor> cubic_coeffs(const at::Tensor& t) {
  return {cubic_far(t + 1), cubic_near(t), cubic_near(1 - t), cubic_far(2 - t)};
}

void check_grid_args(const at::Tensor& input, const at::Tensor& grid, int64_t d, int64_t mode, int64_t padding) {
  TORCH_CHECK(input.dim() == d + 2, "grid_sampler_", d, "d(): expected ", d + 2, "D input, got ", input.dim(), "D");
  TORCH_CHECK(grid.dim() == d + 2 && grid.size(-1) == d, "grid_sampler_", d, "d(): expected grid of shape (N, ...,",
              d, ") with ", d + 2, " dims, got ", grid.sizes());
  TORCH_CHECK(input.size(0) == grid.size(0), "grid_sampler(): expected grid and input to have same batch size, got ",
              input.size(0), " and ", grid.size(0));
  TORCH_CHECK(input.scalar_type() == grid.scalar_type(),
              "grid_sampler(): expected input and grid to have the same dtype, got ", input.scalar_type(), " and ",
              grid.scalar_type());
  TORCH_CHECK(c10::isFloatingType(input.scalar_type()), "grid_sampler(): expected a floating dtype, got ",
              input.scalar_type());
  for (int64_t k = 2; k < input.dim(); ++k)
    TORCH_CHECK(input.size(k) > 0, "grid_sampler(): expected input to have non-empty spatial dimensions, got ",
                input.sizes());
  TORCH_CHECK(mode >= kBilinear && mode <= kBicubic, "grid_sampler(): unknown interpolation mode ", mode);
  TORCH_CHECK(padding >= kZeros && padding <= kReflection, "grid_sampler(): unknown padding mode ", padding);
  TORCH_CHECK(mode != kBicubic || d == 2, "grid_sampler(): bicubic interpolation only supports 4D input");
}

at::Tensor grid_sample_nd(const at::Tensor& input, const at::Tensor& grid, int64_t d, int64_t mode, int64_t padding,
                          bool align) {
  check_grid_args(input, grid, d, mode, padding);
  const int64_t n = input.size(0), c = input.size(1);
  const at::IntArrayRef spatial = input.sizes().slice(2);
  std::vector<int64_t> out_shape{n, c};
  int64_t l = 1;
  for (int64_t k = 1; k <= d; ++k) {
    out_shape.push_back(grid.size(k));
    l *= grid.size(k);
  }
  if (input.numel() == 0 || l == 0) return at::zeros(out_shape, input.options());
  // Reduced-precision inputs sample in float32 (as ATen's CPU opmath does).
  const at::ScalarType cdt = at::isReducedFloatingType(input.scalar_type()) ? at::kFloat : input.scalar_type();
  at::Tensor flat = input.to(cdt).reshape({n, c, -1});
  at::Tensor g = grid.to(cdt).reshape({n, l, d});

  // coord[k] is along input spatial dim k; the grid's last axis lists x (innermost dim) first.
  std::vector<at::Tensor> coord(d);
  for (int64_t k = 0; k < d; ++k) {
    coord[k] = unnormalize(g.select(2, d - 1 - k), spatial[k], align);
    if (mode != kBicubic) coord[k] = apply_padding(coord[k], spatial[k], padding, align);
  }

  at::Tensor out;
  if (mode == kNearest) {
    std::vector<at::Tensor> idx(d);
    for (int64_t k = 0; k < d; ++k) idx[k] = to_index(at::round(coord[k]), spatial[k]);  // half-to-even
    out = gather_taps(flat, spatial, idx);
    // ATen returns a zero grid gradient for nearest; the long indices above cut the grid out
    // of the graph, so multiply by an exact 1 that carries round()'s zero derivative.
    if (at::GradMode::is_enabled() && grid.requires_grad()) {
      for (int64_t k = 0; k < d; ++k) {
        at::Tensor r = at::round(coord[k]).clamp(-4, static_cast<double>(spatial[k] + 3));
        out = out * (r - r.detach() + 1).unsqueeze(1);
      }
    }
  } else if (mode == kBilinear) {
    std::vector<at::Tensor> lo(d), frac(d);
    for (int64_t k = 0; k < d; ++k) {
      lo[k] = at::floor(coord[k]);
      frac[k] = coord[k] - lo[k];
    }
    for (int64_t corner = 0; corner < (int64_t{1} << d); ++corner) {
      std::vector<at::Tensor> idx(d);
      at::Tensor w;
      for (int64_t k = 0; k < d; ++k) {
        const bool up = (corner >> k) & 1;
        idx[k] = to_index(up ? lo[k] + 1 : lo[k], spatial[k]);
        at::Tensor wk = up ? frac[k] : 1 - frac[k];
        w = w.defined() ? w * wk : wk;
      }
      at::Tensor term = w.unsqueeze(1) * gather_taps(flat, spatial, idx);
      out = out.defined() ? out + term : term;
    }
  } else {  // bicubic, 2D only: padding applies to every tap coordinate
    at::Tensor lo_y = at::floor(coord[0]), lo_x = at::floor(coord[1]);
    std::vector<at::Tensor> wy = cubic_coeffs(coord[0] - lo_y), wx = cubic_coeffs(coord[1] - lo_x);
    for (int64_t i = 0; i < 4; ++i) {
      at::Tensor ty = apply_padding(lo_y + (i - 1), spatial[0], padding, align);
      for (int64_t j = 0; j < 4; ++j) {
        at::Tensor tx = apply_padding(lo_x + (j - 1), spatial[1], padding, align);
        std::vector<at::Tensor> idx{to_index(at::trunc(ty), spatial[0]), to_index(at::trunc(tx), spatial[1])};
        at::Tensor term = (wy[i] * wx[j]).unsqueeze(1) * gather_taps(flat, spatial, idx);
        out = out.defined() ? out + term : term;
      }
    }
  }
  return out.reshape(out_shape).to(input.scalar_type());
}

at::Tensor k_grid_sampler_2d(const at::Tensor& input, const at::Tensor& grid, int64_t mode, int64_t padding,
                             bool align) {
  return grid_sample_nd(input, grid, 2, mode, padding, align);
}
at::Tensor k_grid_sampler_3d(const at::Tensor& input, const at::Tensor& grid, int64_t mode, int64_t padding,
                             bool align) {
  return grid_sample_nd(input, grid, 3, mode, padding, align);
}

// Direct calls of aten::grid_sampler_{2,3}d_backward: differentiate the composition above.
// Kernels run below autograd, so autograd's keys are re-enabled for the local graph.
std::tuple<at::Tensor, at::Tensor> grid_sample_backward_nd(const at::Tensor& grad_output, const at::Tensor& input,
                                                           const at::Tensor& grid, int64_t d, int64_t mode,
                                                           int64_t padding, bool align,
                                                           std::array<bool, 2> output_mask) {
  const auto tls = c10::impl::tls_local_dispatch_key_set();
  c10::impl::ForceDispatchKeyGuard with_autograd(tls.included_,
                                                 tls.excluded_ - c10::autograd_dispatch_keyset_with_ADInplaceOrView);
  at::AutoGradMode grad_on(true);
  at::Tensor x = input.detach().requires_grad_(true);
  at::Tensor g = grid.detach().requires_grad_(true);
  at::Tensor out = grid_sample_nd(x, g, d, mode, padding, align);
  TORCH_CHECK(grad_output.sizes() == out.sizes(), "grid_sampler_", d, "d_backward(): expected grad_output of shape ",
              out.sizes(), ", got ", grad_output.sizes());
  auto grads = torch::autograd::grad({out}, {x, g}, {grad_output}, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
  at::Tensor gx = grads[0].defined() ? grads[0] : at::zeros_like(input);
  at::Tensor gg = grads[1].defined() ? grads[1] : at::zeros_like(grid);
  return {output_mask[0] ? gx : at::Tensor(), gg};
}
std::tuple<at::Tensor, at::Tensor> k_grid_sampler_2d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                              const at::Tensor& grid, int64_t mode, int64_t padding,
                                                              bool align, std::array<bool, 2> output_mask) {
  return grid_sample_backward_nd(grad_output, input, grid, 2, mode, padding, align, output_mask);
}
std::tuple<at::Tensor, at::Tensor> k_grid_sampler_3d_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                              const at::Tensor& grid, int64_t mode, int64_t padding,
                                                              bool align, std::array<bool, 2> output_mask) {
  return grid_sample_backward_nd(grad_output, input, grid, 3, mode, padding, align, output_mask);
}

// Antialiased bilinear (triangle filter widened by the downscale factor) as a dense
// (out, in) weight matrix, computed on the host with ATen's float rules.
at::Tensor aa_weight_matrix(int64_t in, int64_t out, bool align, std::optional<double> scale_opt) {
  float scale;
  if (align) {
    scale = out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  } else {
    scale = (scale_opt.has_value() && *scale_opt > 0) ? static_cast<float>(1.0 / *scale_opt)
                                                       : static_cast<float>(in) / static_cast<float>(out);
  }
  const float support = scale >= 1.f ? scale : 1.f;
  const float invscale = scale >= 1.f ? 1.f / scale : 1.f;
  at::Tensor w = at::zeros({out, in}, at::kFloat);
  float* data = w.data_ptr<float>();
  for (int64_t i = 0; i < out; ++i) {
    const float center = scale * (i + 0.5f);
    const int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5f), int64_t{0});
    const int64_t xmax = std::min(static_cast<int64_t>(center + support + 0.5f), in);
    float total = 0.f;
    for (int64_t j = xmin; j < xmax; ++j) {
      const float x = std::fabs((j - center + 0.5f) * invscale);
      const float v = x < 1.f ? 1.f - x : 0.f;
      data[i * in + j] = v;
      total += v;
    }
    if (total != 0.f)
      for (int64_t j = xmin; j < xmax; ++j) data[i * in + j] /= total;
  }
  return w;
}

at::Tensor k_upsample_bilinear2d_aa(const at::Tensor& self, c10::SymIntArrayRef output_size, bool align,
                                    std::optional<double> scales_h, std::optional<double> scales_w) {
  TORCH_CHECK(self.dim() == 4, "_upsample_bilinear2d_aa(): expected 4D input, got ", self.dim(), "D");
  TORCH_CHECK(output_size.size() == 2, "_upsample_bilinear2d_aa(): output_size must have 2 elements, got ",
              output_size.size());
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "_upsample_bilinear2d_aa(): expected a floating dtype, got ",
              self.scalar_type());
  const int64_t out_h = output_size[0].expect_int(), out_w = output_size[1].expect_int();
  const int64_t in_h = self.size(2), in_w = self.size(3);
  TORCH_CHECK(in_h > 0 && in_w > 0 && out_h > 0 && out_w > 0,
              "_upsample_bilinear2d_aa(): input and output sizes should be greater than 0, got input (", in_h, ", ",
              in_w, ") output (", out_h, ", ", out_w, ")");
  const at::ScalarType cdt = at::isReducedFloatingType(self.scalar_type()) ? at::kFloat : self.scalar_type();
  at::Tensor wh = aa_weight_matrix(in_h, out_h, align, scales_h).to(self.device(), cdt);
  at::Tensor ww = aa_weight_matrix(in_w, out_w, align, scales_w).to(self.device(), cdt);
  at::Tensor rows = at::matmul(self.to(cdt), ww.t());  // (N, C, H, out_w)
  return at::matmul(wh, rows).to(self.scalar_type());  // (N, C, out_h, out_w)
}
at::Tensor& k_upsample_bilinear2d_aa_out(const at::Tensor& self, c10::SymIntArrayRef output_size, bool align,
                                         std::optional<double> scales_h, std::optional<double> scales_w,
                                         at::Tensor& out) {
  return write_out(k_upsample_bilinear2d_aa(self, output_size, align, scales_h, scales_w), out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("grid_sampler_2d", k_grid_sampler_2d);
  m.impl("grid_sampler_3d", k_grid_sampler_3d);
  m.impl("grid_sampler_2d_backward", k_grid_sampler_2d_backward);
  m.impl("grid_sampler_3d_backward", k_grid_sampler_3d_backward);
  m.impl("_upsample_bilinear2d_aa", k_upsample_bilinear2d_aa);
  m.impl("_upsample_bilinear2d_aa.out", k_upsample_bilinear2d_aa_out);
}

// Differentiate through the composition above instead of ATen's *_backward kernels.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("grid_sampler_2d", k_grid_sampler_2d);
  m.impl("grid_sampler_3d", k_grid_sampler_3d);
  m.impl("_upsample_bilinear2d_aa", k_upsample_bilinear2d_aa);
}

}  // namespace tpu::aten
