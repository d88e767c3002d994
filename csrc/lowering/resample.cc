// Separable resampling as matrix products: adaptive average pooling and upsampling (nearest,
// nearest-exact, linear/bilinear/trilinear, bicubic) apply one [out, in] matrix per spatial
// dim; their gradients apply the transposes. The matrices are computed on the host with
// PyTorch's index and weight formulas and embedded as constants.
#include <cmath>
#include <cstring>

#include "lowering/hlo_names.h"
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

using Matrix = std::vector<double>;  // row-major [out, in]

Matrix adaptive_matrix(int64_t in, int64_t out) {
  Matrix m(out * in, 0.0);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = (o * in) / out;
    const int64_t end = ((o + 1) * in + out - 1) / out;
    for (int64_t i = start; i < end; ++i) m[o * in + i] = 1.0 / static_cast<double>(end - start);
  }
  return m;
}

// ATen's area_pixel_compute_scale / source index.
double pixel_scale(int64_t in, int64_t out, bool align_corners, double scale) {
  if (align_corners) return out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  return scale > 0 ? 1.0 / scale : static_cast<double>(in) / static_cast<double>(out);
}

double source_index(double scale, int64_t dst, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<double>(dst);
  const double src = scale * (static_cast<double>(dst) + 0.5) - 0.5;
  return (!cubic && src < 0) ? 0.0 : src;
}

double cubic1(double x, double a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
double cubic2(double x, double a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

Matrix interp_matrix(const std::string& mode, int64_t in, int64_t out, bool align_corners, double scale_factor) {
  Matrix m(out * in, 0.0);
  auto add = [&](int64_t o, int64_t i, double w) { m[o * in + std::min(std::max<int64_t>(i, 0), in - 1)] += w; };
  if (mode == "nearest" || mode == "nearest_exact") {
    const double scale = scale_factor > 0 ? 1.0 / scale_factor : static_cast<double>(in) / static_cast<double>(out);
    for (int64_t o = 0; o < out; ++o) {
      const double src = mode == "nearest" ? std::floor(o * scale) : std::floor((o + 0.5) * scale);
      add(o, std::min(static_cast<int64_t>(src), in - 1), 1.0);
    }
    return m;
  }
  const double scale = pixel_scale(in, out, align_corners, scale_factor);
  if (mode == "linear") {
    for (int64_t o = 0; o < out; ++o) {
      const double src = source_index(scale, o, align_corners, false);
      const int64_t i0 = std::min(static_cast<int64_t>(src), in - 1);
      const int64_t i1 = i0 < in - 1 ? i0 + 1 : i0;
      const double l1 = src - static_cast<double>(i0);
      add(o, i0, 1.0 - l1);
      add(o, i1, l1);
    }
    return m;
  }
  // cubic (A = -0.75), taps clamped to the border
  const double a = -0.75;
  for (int64_t o = 0; o < out; ++o) {
    const double src = source_index(scale, o, align_corners, true);
    const int64_t i = static_cast<int64_t>(std::floor(src));
    const double t = src - static_cast<double>(i);
    add(o, i - 1, cubic2(t + 1.0, a));
    add(o, i, cubic1(t, a));
    add(o, i + 1, cubic1(1.0 - t, a));
    add(o, i + 2, cubic2(2.0 - t, a));
  }
  return m;
}

// Applies `m` ([out, in]) along dimension `dim` of x.
Value apply(Builder& b, Value x, int64_t dim, const Matrix& m, int64_t out, int64_t in, bool transpose) {
  const ElementType t = b.dtype(x);
  Value mat = b.constant_floats(t, transpose ? Dims{in, out} : Dims{out, in},
                                transpose ? [&] {
                                  Matrix tr(m.size());
                                  for (int64_t o = 0; o < out; ++o)
                                    for (int64_t i = 0; i < in; ++i) tr[i * out + o] = m[o * in + i];
                                  return tr;
                                }()
                                          : m);
  // dot_general puts the matrix's free dim last; move it back to `dim`.
  Value r = b.dot_general(x, mat, {}, {}, {dim}, {1}, t, true);
  const int64_t rank = b.type(x).rank();
  Dims perm(rank);
  for (int64_t i = 0; i < rank; ++i) perm[i] = i < dim ? i : (i == dim ? rank - 1 : i - 1);
  return b.transpose(r, perm);
}

bool half(ElementType t) { return t == ElementType::kF16 || t == ElementType::kBF16; }

// attrs "scales": per spatial dim the scale factor's double bit pattern (0.0: not given).
double scale_at(const Attrs& a, size_t i) {
  const int64_t bits = a.get_ints("scales")[i];
  double v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// adaptive_avg_pool: inputs [x]; attrs output_size (trailing spatial dims)
std::vector<Value> lower_adaptive_avg_pool(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const ElementType t = b.dtype(in[0]);
  Value x = half(t) ? b.convert(in[0], ElementType::kF32) : in[0];
  const Dims& out = ctx.attrs.get_ints("output_size");
  const int64_t lead = b.type(x).rank() - static_cast<int64_t>(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t d = lead + static_cast<int64_t>(i);
    const int64_t n = b.dims(x)[d];
    x = apply(b, x, d, adaptive_matrix(n, out[i]), out[i], n, false);
  }
  return {b.convert(x, t)};
}

// adaptive_avg_pool_backward: inputs [grad, self]
std::vector<Value> lower_adaptive_avg_pool_backward(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const ElementType t = b.dtype(in[0]);
  Value g = half(t) ? b.convert(in[0], ElementType::kF32) : in[0];
  const Dims sd = b.dims(in[1]);
  const Dims gd = b.dims(g);
  const int64_t n = static_cast<int64_t>(ctx.attrs.get_int("spatial"));
  const int64_t lead = static_cast<int64_t>(sd.size()) - n;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = lead + i;
    g = apply(b, g, d, adaptive_matrix(sd[d], gd[d]), gd[d], sd[d], true);
  }
  return {b.convert(g, t)};
}

// upsample: inputs [x]; attrs mode, output_size, scales, align_corners
std::vector<Value> lower_upsample(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const ElementType t = b.dtype(in[0]);
  Value x = half(t) ? b.convert(in[0], ElementType::kF32) : in[0];
  const Dims& out = ctx.attrs.get_ints("output_size");
  const std::string& mode = ctx.attrs.get_string("mode");
  const bool align = ctx.attrs.get_bool("align_corners", false);
  const int64_t lead = b.type(x).rank() - static_cast<int64_t>(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t d = lead + static_cast<int64_t>(i);
    const int64_t n = b.dims(x)[d];
    const double scale = scale_at(ctx.attrs, i);
    x = apply(b, x, d, interp_matrix(mode, n, out[i], align, scale), out[i], n, false);
  }
  return {b.convert(x, t)};
}

// upsample_backward: inputs [grad]; attrs mode, input_size (all dims), scales, align_corners
std::vector<Value> lower_upsample_backward(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const ElementType t = b.dtype(in[0]);
  Value g = half(t) ? b.convert(in[0], ElementType::kF32) : in[0];
  const Dims& input = ctx.attrs.get_ints("input_size");
  const std::string& mode = ctx.attrs.get_string("mode");
  const bool align = ctx.attrs.get_bool("align_corners", false);
  const int64_t n = static_cast<int64_t>(ctx.attrs.get_ints("scales").size());
  const int64_t lead = static_cast<int64_t>(input.size()) - n;
  const Dims gd = b.dims(g);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = lead + i;
    const double scale = scale_at(ctx.attrs, static_cast<size_t>(i));
    g = apply(b, g, d, interp_matrix(mode, input[d], gd[d], align, scale), gd[d], input[d], true);
  }
  return {b.convert(g, t)};
}

const LoweringEntry kResample[] = {
    {"adaptive_avg_pool", lower_adaptive_avg_pool},
    {"adaptive_avg_pool_backward", lower_adaptive_avg_pool_backward},
    {"upsample", lower_upsample},
    {"upsample_backward", lower_upsample_backward},
};

TPU_REGISTER_LOWERINGS(kResample);

}  // namespace
}  // namespace tpu::lowering
