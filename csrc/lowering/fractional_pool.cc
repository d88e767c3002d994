// Fractional max pooling (Graham, 2014) forward: window starts from per-plane random samples,
// then max and flat in-plane argmax over each window, bit-identical to PyTorch's CPU kernel.
// The backward is the shared max_pool_backward lowering (a scatter-add by indices).
#include <cstdint>
#include <limits>

#include "lowering/hlo_names.h"
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

// PyTorch computes the interval math in the input's dtype (c10::Half / c10::BFloat16 round every
// operation to 16 bits). Half types compute in f32 here with an explicit reduce_precision after
// each operation, which XLA may not fold away, so the starts match the CPU exactly.
struct IntervalMath {
  Builder& b;
  ElementType t;  // input dtype
  ElementType work() const { return half() ? ElementType::kF32 : t; }
  bool half() const { return t == ElementType::kBF16 || t == ElementType::kF16; }
  Value round(Value v) const {
    if (!half()) return v;
    const bool bf16 = t == ElementType::kBF16;
    const std::string attrs = std::string("exponent_bits = ") + (bf16 ? "8" : "5") +
                              " : i32, mantissa_bits = " + (bf16 ? "7" : "10") + " : i32";
    return b.emit("stablehlo.reduce_precision", {v}, b.type(v), attrs);
  }
};

// Window start per output position along one spatial dim: [rows, out] int64, from the samples
// `s` ([rows], input dtype). start[i] = int((i + s) * alpha) - int(s * alpha) with
// alpha = (in - k) / (out - 1); the last window ends at the input's end.
Value window_starts(Builder& b, const IntervalMath& m, Value s, int64_t in, int64_t out, int64_t k) {
  const int64_t rows = b.dims(s)[0];
  const ElementType w = m.work();
  const TensorType it{ElementType::kI64, {rows, out}};
  const TensorType wt{w, {rows, out}};
  Value pos = b.iota(it, 1);
  Value last = b.full(it, static_cast<double>(in - k));
  if (out == 1) return last;
  Value sw = b.convert(s, w);
  Value alpha = m.round(b.div(m.round(b.constant(w, static_cast<double>(in - k))),
                              m.round(b.constant(w, static_cast<double>(out - 1)))));
  Value s_alpha = b.convert(m.round(b.mul(sw, b.broadcast_in_dim(alpha, {rows}, {}))), ElementType::kI64);
  Value shifted = m.round(b.add(m.round(b.convert(pos, w)), b.broadcast_in_dim(sw, wt.dims, {0})));
  Value scaled = m.round(b.mul(shifted, b.broadcast_in_dim(alpha, wt.dims, {})));
  // float -> int converts truncate toward zero, like the CPU's static_cast<int>.
  Value start = b.sub(b.convert(scaled, ElementType::kI64), b.broadcast_in_dim(s_alpha, it.dims, {0}));
  // Samples outside [0, 1) are not PyTorch's contract; clamp so the gather stays in the plane.
  start = b.clamp(b.full(it, 0), start, last);
  return b.select(b.compare(pos, b.full(it, static_cast<double>(out - 1)), Compare::kEQ), last, start);
}

// CPU rule, scanning the window in order: take x if x > best or x is NaN. So the result is the
// last NaN if any, else the first maximum. As a symmetric combine on (value, flat index):
Args pick(Builder& b, const Args& a) {
  Value av = a[0], ai = a[1], xv = a[2], xi = a[3];
  Value a_nan = b.compare(av, av, Compare::kNE), x_nan = b.compare(xv, xv, Compare::kNE);
  Value x_later = b.compare(xi, ai, Compare::kGT), x_earlier = b.compare(xi, ai, Compare::kLT);
  Value x_wins_num = b.binary("stablehlo.or", b.compare(xv, av, Compare::kGT),
                              b.binary("stablehlo.and", b.compare(xv, av, Compare::kEQ), x_earlier));
  // both NaN: later wins; one NaN: it wins; neither: the bigger, ties to the earlier.
  Value take = b.select(a_nan, b.binary("stablehlo.and", x_nan, x_later),
                        b.binary("stablehlo.or", x_nan, x_wins_num));
  return {b.select(take, xv, av), b.select(take, xi, ai)};
}

// fractional_max_pool: inputs [x [N, C, S...], samples [N, C, n]]; attrs kernel, output_size,
// sample_cols (the samples column of each spatial dim). Outputs (values, flat in-plane indices).
Args lower_fractional_max_pool(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& kernel = ctx.attrs.get_ints("kernel");
  const Dims& out = ctx.attrs.get_ints("output_size");
  const Dims& cols = ctx.attrs.get_ints("sample_cols");
  const int64_t n = static_cast<int64_t>(kernel.size());
  const Dims xd = b.dims(in[0]);
  const int64_t lead = static_cast<int64_t>(xd.size()) - n;
  int64_t rows = 1, plane = 1;
  for (int64_t i = 0; i < lead; ++i) rows *= xd[i];
  for (int64_t i = 0; i < n; ++i) plane *= xd[lead + i];
  const ElementType t = b.dtype(in[0]);
  const IntervalMath m{b, t};
  Value x = b.reshape(in[0], {rows, plane});
  Value samples = b.reshape(in[1], {rows, n});

  // big = [rows, out..., kernel...]: the flat in-plane index of every window element.
  Dims big{rows};
  big.insert(big.end(), out.begin(), out.end());
  big.insert(big.end(), kernel.begin(), kernel.end());
  const TensorType bt{ElementType::kI64, big};
  Value flat = b.full(bt, 0);
  int64_t stride = 1;
  for (int64_t i = n - 1; i >= 0; --i) {
    const int64_t in_i = xd[lead + i];
    Value s = b.reshape(b.slice(samples, {0, cols[i]}, {rows, cols[i] + 1}, {1, 1}), {rows});
    Value start = b.broadcast_in_dim(window_starts(b, m, s, in_i, out[i], kernel[i]), big, {0, 1 + i});
    Value coord = b.add(start, b.iota(bt, 1 + n + i));
    flat = b.add(flat, b.mul(coord, b.full(bt, static_cast<double>(stride))));
    stride *= in_i;
  }
  Dims with_vec = big;
  with_vec.push_back(1);
  Value coords = b.concatenate({b.reshape(b.iota(bt, 0), with_vec), b.reshape(flat, with_vec)},
                               static_cast<int64_t>(big.size()));
  Builder::GatherDims g;
  g.collapsed_slice_dims = {0, 1};
  g.start_index_map = {0, 1};
  g.index_vector_dim = static_cast<int64_t>(big.size());
  g.slice_sizes = {1, 1};
  Value vals = b.gather(x, coords, g, big);

  Dims window_dims;
  for (int64_t i = 0; i < n; ++i) window_dims.push_back(1 + n + i);
  auto r = b.reduce_multi({vals, flat},
                          {b.constant(t, -std::numeric_limits<double>::infinity()),
                           b.constant_int(ElementType::kI64, std::numeric_limits<int64_t>::max())},
                          window_dims, [&](const Args& a) { return pick(b, a); });
  Dims od(xd.begin(), xd.begin() + lead);
  od.insert(od.end(), out.begin(), out.end());
  return {b.reshape(r[0], od), b.reshape(r[1], od)};
}

const LoweringEntry kFractionalPool[] = {
    {"fractional_max_pool", lower_fractional_max_pool},
};

TPU_REGISTER_LOWERINGS(kFractionalPool);

}  // namespace
}  // namespace tpu::lowering
