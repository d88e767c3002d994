// Max and average pooling over the trailing `spatial` dims (any leading batch/channel dims),
// with PyTorch's output sizes (ceil_mode), padding and divisor rules, and their gradients.
#include <cmath>
#include <limits>

#include "lowering/convolution.h"
#include "lowering/hlo_names.h"
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

using Padding = std::vector<std::pair<int64_t, int64_t>>;
using Args = std::vector<Value>;

struct Window {
  size_t lead = 0;  // leading (non-pooled) dims
  Dims kernel, stride, padding, dilation;
  bool ceil_mode = false;
  Dims in, out;  // spatial sizes
};

int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = d * (k - 1) + 1;
  int64_t out = (in + 2 * p - span + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

Window window_of(Builder& b, Value x, const Attrs& a) {
  Window w;
  const Dims d = b.dims(x);
  const size_t n = static_cast<size_t>(a.get_int("spatial"));
  w.lead = d.size() - n;
  w.kernel = a.get_ints("kernel");
  w.stride = a.get_ints("stride");
  w.padding = a.get_ints("padding");
  w.dilation = a.has("dilation") ? a.get_ints("dilation") : Dims(n, 1);
  w.ceil_mode = a.get_bool("ceil_mode");
  for (size_t i = 0; i < n; ++i) {
    w.in.push_back(d[w.lead + i]);
    w.out.push_back(pooled_size(d[w.lead + i], w.kernel[i], w.stride[i], w.padding[i], w.dilation[i], w.ceil_mode));
  }
  return w;
}

// Full-rank window/stride/dilation/padding for reduce_window, padding high enough for the last
// window; the result is sliced to the PyTorch output size.
struct FullWindow {
  Dims window, strides, dilations;
  Padding padding;
};

FullWindow full(const Window& w) {
  FullWindow f;
  for (size_t i = 0; i < w.lead; ++i) {
    f.window.push_back(1);
    f.strides.push_back(1);
    f.dilations.push_back(1);
    f.padding.push_back({0, 0});
  }
  for (size_t i = 0; i < w.kernel.size(); ++i) {
    f.window.push_back(w.kernel[i]);
    f.strides.push_back(w.stride[i]);
    f.dilations.push_back(w.dilation[i]);
    const int64_t needed = (w.out[i] - 1) * w.stride[i] + w.dilation[i] * (w.kernel[i] - 1) + 1;
    f.padding.push_back({w.padding[i], std::max<int64_t>(needed - w.in[i] - w.padding[i], 0)});
  }
  return f;
}

Value crop(Builder& b, Value v, const Window& w) {
  Dims limit = b.dims(v);
  for (size_t i = 0; i < w.out.size(); ++i) limit[w.lead + i] = w.out[i];
  return b.slice(v, Dims(limit.size(), 0), limit, Dims(limit.size(), 1));
}

// max_pool: inputs [x]; attrs spatial, kernel, stride, padding, dilation, ceil_mode.
// Outputs (values, indices): indices are flat positions within each input plane.
Args lower_max_pool(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  const Window w = window_of(b, x, ctx.attrs);
  const FullWindow f = full(w);
  const Dims d = b.dims(x);
  // Flat in-plane index of every element.
  const TensorType it{ElementType::kI64, d};
  Value flat = b.full(it, 0);
  int64_t stride = 1;
  for (int64_t i = static_cast<int64_t>(w.in.size()) - 1; i >= 0; --i) {
    flat = b.add(flat, b.mul(b.iota(it, static_cast<int64_t>(w.lead) + i), b.full(it, static_cast<double>(stride))));
    stride *= w.in[i];
  }
  const ElementType t = b.dtype(x);
  Value vinit = is_floating(t) ? b.constant(t, -INFINITY) : b.constant(t, t == ElementType::kU8 ? 0 : -9.2e18);
  if (t == ElementType::kI64) vinit = b.constant_int(t, std::numeric_limits<int64_t>::min());
  Value iinit = b.constant_int(ElementType::kI64, -1);
  auto out = b.reduce_window_multi({x, flat}, {vinit, iinit}, f.window, f.strides, f.dilations, f.padding,
                                   [&](const std::vector<Value>& a) {
                                     // a: (acc_v, acc_i, x_v, x_i); NaN wins; ties keep the first index.
                                     Value better = b.compare(a[2], a[0], Compare::kGT);
                                     if (is_floating(t)) {
                                       better = b.binary("stablehlo.or", better, b.compare(a[2], a[2], Compare::kNE));
                                     }
                                     Value tie = b.binary("stablehlo.and", b.compare(a[2], a[0], Compare::kEQ),
                                                          b.compare(a[3], a[1], Compare::kLT));
                                     Value take = b.binary("stablehlo.or", better, tie);
                                     if (is_floating(t)) {
                                       Value acc_nan = b.compare(a[0], a[0], Compare::kNE);
                                       Value x_nan = b.compare(a[2], a[2], Compare::kNE);
                                       // keep an accumulated NaN unless x is an earlier NaN
                                       take = b.select(acc_nan,
                                                       b.binary("stablehlo.and", x_nan, b.compare(a[3], a[1], Compare::kLT)),
                                                       take);
                                     }
                                     return std::vector<Value>{b.select(take, a[2], a[0]), b.select(take, a[3], a[1])};
                                   });
  return {crop(b, out[0], w), crop(b, out[1], w)};
}

// Sum of `g` ([lead..., out plane...]) into the flat in-plane positions `indices`.
Value scatter_to_planes(Builder& b, Value g, Value indices, const Dims& lead, int64_t plane_in) {
  int64_t rows = 1;
  for (int64_t d : lead) rows *= d;
  const int64_t plane_out = b.type(g).numel() / std::max<int64_t>(rows, 1);
  Value g2 = b.reshape(g, {rows, plane_out});
  Value i2 = b.reshape(indices, {rows, plane_out});
  const TensorType it{ElementType::kI64, {rows, plane_out}};
  Value coords = b.concatenate({b.reshape(b.iota(it, 0), {rows, plane_out, 1}), b.reshape(i2, {rows, plane_out, 1})}, 2);
  Builder::ScatterDims s;
  s.inserted_window_dims = {0, 1};
  s.scatter_dims_to_operand_dims = {0, 1};
  s.index_vector_dim = 2;
  return b.scatter(b.full(TensorType{b.dtype(g), {rows, plane_in}}, 0), coords, g2, s, "stablehlo.add");
}

// max_pool_backward: inputs [grad, self, indices]; attrs spatial
Args lower_max_pool_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims sd = b.dims(in[1]);
  const size_t n = static_cast<size_t>(ctx.attrs.get_int("spatial"));
  const Dims lead(sd.begin(), sd.end() - static_cast<int64_t>(n));
  int64_t plane = 1;
  for (size_t i = sd.size() - n; i < sd.size(); ++i) plane *= sd[i];
  const ElementType t = b.dtype(in[0]);
  const bool half = t == ElementType::kF16 || t == ElementType::kBF16;
  Value g = half ? b.convert(in[0], ElementType::kF32) : in[0];
  return {b.convert(b.reshape(scatter_to_planes(b, g, in[2], lead, plane), sd), t)};
}

// The divisor of every average-pooling window (over the spatial dims only).
Value avg_divisor(Builder& b, const Window& w, const Attrs& a, ElementType t) {
  const int64_t override_div = a.get_int("divisor_override", 0);
  const TensorType out_t{t, w.out};
  if (override_div != 0) return b.full(out_t, static_cast<double>(override_div));
  const size_t n = w.in.size();
  Value ones = b.full(TensorType{t, w.in}, 1);
  Dims window = w.kernel, strides = w.stride;
  Padding pad;
  if (a.get_bool("count_include_pad")) {
    // Padding counts, the ceil_mode overhang beyond it does not.
    ones = b.pad(ones, b.constant(t, 1), w.padding, w.padding, Dims(n, 0));
    for (size_t i = 0; i < n; ++i) {
      const int64_t needed = (w.out[i] - 1) * w.stride[i] + w.kernel[i];
      pad.push_back({0, std::max<int64_t>(needed - (w.in[i] + 2 * w.padding[i]), 0)});
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const int64_t needed = (w.out[i] - 1) * w.stride[i] + w.kernel[i];
      pad.push_back({w.padding[i], std::max<int64_t>(needed - w.in[i] - w.padding[i], 0)});
    }
  }
  Value counts = b.reduce_window(ones, b.constant(t, 0), window, strides, Dims(n, 1), pad, hlo::ReduceKind::kSum);
  return b.slice(counts, Dims(n, 0), w.out, Dims(n, 1));
}

Value broadcast_divisor(Builder& b, Value div, const Dims& full_dims, size_t lead) {
  Dims map;
  for (size_t i = 0; i < b.dims(div).size(); ++i) map.push_back(static_cast<int64_t>(lead + i));
  return b.broadcast_in_dim(div, full_dims, map);
}

// avg_pool: inputs [x]; attrs spatial, kernel, stride, padding, ceil_mode, count_include_pad,
// divisor_override (0: none)
Args lower_avg_pool(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  const ElementType t = b.dtype(x);
  const bool half = t == ElementType::kF16 || t == ElementType::kBF16;
  if (half) x = b.convert(x, ElementType::kF32);
  const Window w = window_of(b, x, ctx.attrs);
  const FullWindow f = full(w);
  Value sum = crop(b, b.reduce_window(x, b.constant(b.dtype(x), 0), f.window, f.strides, f.dilations, f.padding,
                                      hlo::ReduceKind::kSum), w);
  Value div = broadcast_divisor(b, avg_divisor(b, w, ctx.attrs, b.dtype(x)), b.dims(sum), w.lead);
  return {b.convert(b.div(sum, div), t)};
}

// avg_pool_backward: inputs [grad, self]; the transposed (depthwise, all-ones kernel)
// convolution of grad / divisor.
Args lower_avg_pool_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const ElementType t = b.dtype(in[0]);
  const bool half = t == ElementType::kF16 || t == ElementType::kBF16;
  Value g = half ? b.convert(in[0], ElementType::kF32) : in[0];
  const Window w = window_of(b, in[1], ctx.attrs);
  Value div = broadcast_divisor(b, avg_divisor(b, w, ctx.attrs, b.dtype(g)), b.dims(g), w.lead);
  g = b.div(g, div);
  int64_t channels = 1;
  const Dims gd = b.dims(g);
  for (size_t i = 0; i < w.lead; ++i) channels *= gd[i];
  if (channels == 0) return {b.full(TensorType{t, b.dims(in[1])}, 0)};  // empty batch: no planes
  Dims g4{1, channels};
  g4.insert(g4.end(), w.out.begin(), w.out.end());
  Dims kshape{channels, 1};
  kshape.insert(kshape.end(), w.kernel.begin(), w.kernel.end());
  ConvParams p;
  p.stride = w.stride;
  p.padding = w.padding;
  p.dilation = Dims(w.kernel.size(), 1);
  p.output_padding = Dims(w.kernel.size(), 0);
  p.groups = channels;
  Value dx = conv_input_grad(b, b.reshape(g, g4), b.full(TensorType{b.dtype(g), kshape}, 1), p, w.in);
  return {b.convert(b.reshape(dx, b.dims(in[1])), t)};
}

const LoweringEntry kPooling[] = {
    {"max_pool", lower_max_pool},
    {"max_pool_backward", lower_max_pool_backward},
    {"avg_pool", lower_avg_pool},
    {"avg_pool_backward", lower_avg_pool_backward},
};

TPU_REGISTER_LOWERINGS(kPooling);

}  // namespace
}  // namespace tpu::lowering
