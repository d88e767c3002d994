// Random numbers from a counter-based generator: every random op takes the generator's
// (seed, offset) as runtime ui64 scalars and draws bits with THREE_FRY, so results depend only
// on the seed and the op sequence (reproducible), and a seed change does not recompile.
#include <cmath>

#include "lowering/hlo_names.h"
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

Value rng_state(Builder& b, Value seed, Value offset) {
  return b.concatenate({b.reshape(seed, {1}), b.reshape(offset, {1})}, 0);
}

// Uniform values k / 2^digits in [0, 1) of `shape`, as ATen draws them: `digits` random bits,
// the target type's precision (24 for float32, 53 for float64, 11 for float16, 8 for bfloat16),
// so the value never rounds up to 1 in the target type. float64 for 53 digits, else float32.
Value uniform01(Builder& b, Value seed, Value offset, const hlo::Dims& shape, int digits) {
  const bool wide = digits > 24;
  const ElementType bits_type = wide ? ElementType::kU64 : ElementType::kU32;
  const ElementType real = wide ? ElementType::kF64 : ElementType::kF32;
  Value bits = b.rng_bit_generator(rng_state(b, seed, offset), TensorType{bits_type, shape}).second;
  const int width = wide ? 64 : 32;
  Value top = b.binary("stablehlo.shift_right_logical", bits, b.full(b.type(bits), width - digits));
  Value k = b.convert(top, real);
  return b.mul(k, b.full(TensorType{real, shape}, std::ldexp(1.0, -digits)));
}

int digits_of(ElementType t) {
  switch (t) {
    case ElementType::kF64: return 53;
    case ElementType::kF16: return 11;
    case ElementType::kBF16: return 8;
    default: return 24;
  }
}

// uniform: inputs [seed, offset, low, high] (low/high in the compute dtype); attrs shape, dtype.
std::vector<Value> lower_uniform(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const auto& shape = ctx.attrs.get_ints("shape");
  Value u = uniform01(b, in[0], in[1], shape, digits_of(ctx.attrs.get_dtype("dtype")));
  Value lo = b.broadcast_in_dim(b.convert(in[2], b.dtype(u)), shape, {});
  Value hi = b.broadcast_in_dim(b.convert(in[3], b.dtype(u)), shape, {});
  Value r = b.add(lo, b.mul(u, b.sub(hi, lo)));
  return {b.convert(r, ctx.attrs.get_dtype("dtype"))};
}

// normal: inputs [seed, offset, mean, std]; Box-Muller over two uniform draws.
std::vector<Value> lower_normal(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const auto& shape = ctx.attrs.get_ints("shape");
  hlo::Dims pair_shape{2};
  pair_shape.insert(pair_shape.end(), shape.begin(), shape.end());
  Value u = uniform01(b, in[0], in[1], pair_shape, ctx.attrs.get_dtype("dtype") == ElementType::kF64 ? 53 : 24);
  const TensorType t{b.dtype(u), shape};
  hlo::Dims start(pair_shape.size(), 0), limit = pair_shape, strides(pair_shape.size(), 1);
  limit[0] = 1;
  Value u1 = b.reshape(b.slice(u, start, limit, strides), shape);
  start[0] = 1;
  limit[0] = 2;
  Value u2 = b.reshape(b.slice(u, start, limit, strides), shape);
  // 1 - u1 lies in (0, 1], so the log is finite.
  Value r = b.unary("stablehlo.sqrt", b.mul(b.full(t, -2.0), b.unary("stablehlo.log", b.sub(b.full(t, 1.0), u1))));
  Value z = b.mul(r, b.unary("stablehlo.cosine", b.mul(b.full(t, 2.0 * M_PI), u2)));
  Value mean = b.broadcast_in_dim(b.convert(in[2], t.dtype), shape, {});
  Value stdv = b.broadcast_in_dim(b.convert(in[3], t.dtype), shape, {});
  return {b.convert(b.add(mean, b.mul(z, stdv)), ctx.attrs.get_dtype("dtype"))};
}

// random_int: inputs [seed, offset, low (i64), span (i64 > 0)]: low + bits % span.
std::vector<Value> lower_random_int(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const auto& shape = ctx.attrs.get_ints("shape");
  Value bits = b.rng_bit_generator(rng_state(b, in[0], in[1]), TensorType{ElementType::kU64, shape}).second;
  Value span = b.broadcast_in_dim(b.convert(in[3], ElementType::kU64), shape, {});
  Value r = b.convert(b.binary("stablehlo.remainder", bits, span), ElementType::kI64);
  Value low = b.broadcast_in_dim(b.convert(in[2], ElementType::kI64), shape, {});
  return {b.convert(b.add(r, low), ctx.attrs.get_dtype("dtype"))};
}

// bernoulli: inputs [seed, offset, p] (p scalar or tensor, float); attrs shape, dtype.
std::vector<Value> lower_bernoulli(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const auto& shape = ctx.attrs.get_ints("shape");
  Value u = uniform01(b, in[0], in[1], shape, 24);
  Value p = b.broadcast_to(b.convert(in[2], ElementType::kF32), shape);
  return {b.convert(b.compare(u, p, hlo::Compare::kLT), ctx.attrs.get_dtype("dtype"))};
}

// dropout: inputs [seed, offset, x, p]; outputs (x * mask / (1 - p), mask).
std::vector<Value> lower_dropout(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  Value x = in[2];
  const hlo::Dims shape = b.dims(x);
  Value u = uniform01(b, in[0], in[1], shape, 24);
  Value keep_p = b.sub(b.constant(ElementType::kF32, 1), b.convert(in[3], ElementType::kF32));
  Value mask = b.compare(u, b.broadcast_in_dim(keep_p, shape, {}), hlo::Compare::kLT);
  Value scale = b.div(b.constant(ElementType::kF32, 1), keep_p);
  Value scaled = b.mul(b.convert(x, ElementType::kF32), b.broadcast_in_dim(scale, shape, {}));
  Value out = b.select(mask, b.convert(scaled, b.dtype(x)), b.full(b.type(x), 0));
  return {out, mask};
}

// Samples transformed from uniform [0, 1): attrs kind (exponential, geometric, log_normal,
// cauchy), shape, dtype; inputs [seed, offset, a, b] (lambda | p | mean, std | median, sigma).
std::vector<Value> lower_random_transform(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const auto& shape = ctx.attrs.get_ints("shape");
  const ElementType dtype = ctx.attrs.get_dtype("dtype");
  const std::string& kind = ctx.attrs.get_string("kind");
  const bool wide = dtype == ElementType::kF64;
  Value u = uniform01(b, in[0], in[1], shape, wide ? 53 : 24);
  const TensorType t = b.type(u);
  auto param = [&](size_t i) { return b.broadcast_in_dim(b.convert(in[i], t.dtype), shape, {}); };
  Value one = b.full(t, 1.0);
  Value r;
  if (kind == "exponential") {
    r = b.div(b.neg(b.unary("stablehlo.log_plus_one", b.neg(u))), param(2));
  } else if (kind == "geometric") {
    r = b.unary("stablehlo.ceil", b.div(b.unary("stablehlo.log_plus_one", b.neg(u)),
                                        b.unary("stablehlo.log_plus_one", b.neg(param(2)))));
    r = b.max(r, one);
  } else if (kind == "log_normal") {
    hlo::Dims pair{2};
    pair.insert(pair.end(), shape.begin(), shape.end());
    Value uu = uniform01(b, in[0], in[1], pair, wide ? 53 : 24);
    hlo::Dims start(pair.size(), 0), limit = pair, strides(pair.size(), 1);
    limit[0] = 1;
    Value u1 = b.reshape(b.slice(uu, start, limit, strides), shape);
    start[0] = 1;
    limit[0] = 2;
    Value u2 = b.reshape(b.slice(uu, start, limit, strides), shape);
    Value rad = b.unary("stablehlo.sqrt", b.mul(b.full(t, -2.0), b.unary("stablehlo.log", b.sub(one, u1))));
    Value z = b.mul(rad, b.unary("stablehlo.cosine", b.mul(b.full(t, 2.0 * M_PI), u2)));
    r = b.unary("stablehlo.exponential", b.add(param(2), b.mul(z, param(3))));
  } else {  // cauchy
    r = b.add(param(2), b.mul(param(3), b.unary("chlo.tan", b.mul(b.full(t, M_PI), b.sub(u, b.full(t, 0.5))))));
  }
  return {b.convert(r, dtype)};
}

// randperm: inputs [seed, offset]; attrs n, dtype. Sorts random keys carrying 0..n-1.
std::vector<Value> lower_randperm(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const int64_t n = ctx.attrs.get_int("n");
  Value keys = b.rng_bit_generator(rng_state(b, in[0], in[1]), TensorType{ElementType::kU64, {n}}).second;
  Value iota = b.iota(TensorType{ElementType::kI64, {n}}, 0);
  auto sorted = b.sort({keys, iota}, 0, true, [&](const std::vector<Value>& a) {
    return std::vector<Value>{b.compare(a[0], a[1], hlo::Compare::kLT)};
  });
  return {b.convert(sorted[1], ctx.attrs.get_dtype("dtype"))};
}

// multinomial: inputs [seed, offset, probs [.., C]]; attrs num_samples, replacement.
// With replacement: inverse-CDF draws; without: the top num_samples of log(p) + Gumbel noise.
std::vector<Value> lower_multinomial(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  Value p = b.convert(in[2], ElementType::kF32);
  const hlo::Dims pd = b.dims(p);
  const int64_t c = pd.back();
  const int64_t k = ctx.attrs.get_int("num_samples");
  const int64_t rank = static_cast<int64_t>(pd.size());
  hlo::Dims lead(pd.begin(), pd.end() - 1);
  if (ctx.attrs.get_bool("replacement")) {
    // cdf along the last dim, normalised
    Value cdf = p;
    for (int64_t step = 1; step < c; step *= 2) {
      hlo::Dims start(rank, 0), limit = pd, strides(rank, 1), low(rank, 0), high(rank, 0), interior(rank, 0);
      limit[rank - 1] = c - step;
      low[rank - 1] = step;
      cdf = b.add(cdf, b.pad(b.slice(cdf, start, limit, strides), b.constant(ElementType::kF32, 0), low, high, interior));
    }
    hlo::Dims total_shape = lead;
    total_shape.push_back(1);
    hlo::Dims lim = pd;
    hlo::Dims st(rank, 0);
    st[rank - 1] = c - 1;
    Value total = b.slice(cdf, st, lim, hlo::Dims(rank, 1));
    hlo::Dims us = lead;
    us.push_back(k);
    Value u = b.mul(uniform01(b, in[0], in[1], us, 24), b.broadcast_to(total, us));
    // sample = number of cdf entries <= u (clamped to the last class)
    hlo::Dims cmp = lead;
    cmp.push_back(k);
    cmp.push_back(c);
    hlo::Dims map_u, map_c;
    for (int64_t i = 0; i < rank; ++i) map_u.push_back(i);
    for (int64_t i = 0; i < rank - 1; ++i) map_c.push_back(i);
    map_c.push_back(rank);
    Value le = b.compare(b.broadcast_in_dim(cdf, cmp, map_c), b.broadcast_in_dim(u, cmp, map_u), hlo::Compare::kLE);
    Value count = b.reduce(b.convert(le, ElementType::kI64), b.constant(ElementType::kI64, 0), {rank}, hlo::ReduceKind::kSum);
    return {b.min(count, b.full(b.type(count), static_cast<double>(c - 1)))};
  }
  Value u = uniform01(b, in[0], in[1], pd, 24);
  Value tiny = b.full(b.type(u), 1e-20);
  Value gumbel = b.neg(b.unary("stablehlo.log", b.neg(b.unary("stablehlo.log", b.max(u, tiny)))));
  Value score = b.add(b.unary("stablehlo.log", p), gumbel);
  Value iota = b.iota(TensorType{ElementType::kI64, pd}, rank - 1);
  auto sorted = b.sort({score, iota}, rank - 1, true, [&](const std::vector<Value>& a) {
    return std::vector<Value>{b.compare(a[0], a[1], hlo::Compare::kGT)};
  });
  hlo::Dims limit = pd;
  limit[rank - 1] = k;
  return {b.slice(sorted[1], hlo::Dims(rank, 0), limit, hlo::Dims(rank, 1))};
}

TPU_REGISTER_LOWERING("bernoulli", lower_bernoulli);
TPU_REGISTER_LOWERING("dropout", lower_dropout);
TPU_REGISTER_LOWERING("random_transform", lower_random_transform);
TPU_REGISTER_LOWERING("randperm", lower_randperm);
TPU_REGISTER_LOWERING("multinomial", lower_multinomial);
TPU_REGISTER_LOWERING("uniform", lower_uniform);
TPU_REGISTER_LOWERING("normal", lower_normal);
TPU_REGISTER_LOWERING("random_int", lower_random_int);

}  // namespace
}  // namespace tpu::lowering
