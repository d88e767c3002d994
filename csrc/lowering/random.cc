// Random numbers from a counter-based generator: every random op takes the generator's
// (seed, offset) as runtime ui64 scalars and draws bits with THREE_FRY, so results depend only
// on the seed and the op sequence (reproducible), and a seed change does not recompile.
#include <cmath>

#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using hlo::Builder;
using hlo::TensorType;
using hlo::Value;

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

TPU_REGISTER_LOWERING("uniform", lower_uniform);
TPU_REGISTER_LOWERING("normal", lower_normal);
TPU_REGISTER_LOWERING("random_int", lower_random_int);

}  // namespace
}  // namespace tpu::lowering
