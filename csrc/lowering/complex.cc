// Complex-number lowerings: build a complex value from parts (complex, polar), take it apart
// (real, imag) and conjugate it. StableHLO has real/imag/complex ops; everything else about
// complex values (add, mul, exp, dot, reduce) is the ordinary op on complex element types.
#include "lowering/hlo_names.h"
#include "lowering/pointwise.h"
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

ElementType complex_of(ElementType part) {
  return part == ElementType::kF64 ? ElementType::kC128 : ElementType::kC64;
}

Value make_complex(Builder& b, Value re, Value im) {
  TensorType t = b.type(re);
  t.dtype = complex_of(t.dtype);
  return b.emit("stablehlo.complex", {re, im}, t);
}

// complex(real, imag): both already in the same real dtype, broadcast to one shape.
Args lower_complex(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& shape = ctx.attrs.get_ints("shape");
  return {make_complex(b, b.broadcast_to(in[0], shape), b.broadcast_to(in[1], shape))};
}

// polar(abs, angle) = abs * (cos(angle) + i sin(angle)).
Args lower_polar(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& shape = ctx.attrs.get_ints("shape");
  Value r = b.broadcast_to(in[0], shape);
  Value theta = b.broadcast_to(in[1], shape);
  return {make_complex(b, b.mul(r, b.unary("stablehlo.cosine", theta)),
                       b.mul(r, b.unary("stablehlo.sine", theta)))};
}

Args lower_conj(Context& ctx, const Args& in) {
  return {conjugate(ctx.b, in[0])};
}

Args lower_real(Context& ctx, const Args& in) { return {real_part(ctx.b, in[0])}; }

Args lower_imag(Context& ctx, const Args& in) { return {imag_part(ctx.b, in[0])}; }

const LoweringEntry kComplex[] = {
    {"complex", lower_complex}, {"polar", lower_polar}, {"conj", lower_conj},
    {"complex_real", lower_real}, {"complex_imag", lower_imag},
};
TPU_REGISTER_LOWERINGS(kComplex);

}  // namespace
}  // namespace tpu::lowering

namespace tpu::lowering {
namespace {

// |z| and arg(z) of complex values (real results); the real-typed lowerings stay untouched.
std::vector<Value> lower_complex_abs(Context& ctx, const std::vector<Value>& in) {
  return {magnitude(ctx.b, in[0])};
}

std::vector<Value> lower_complex_angle(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  TensorType t = b.type(in[0]);
  t.dtype = complex_part(t.dtype);
  Value re = b.emit("stablehlo.real", {in[0]}, t);
  Value im = b.emit("stablehlo.imag", {in[0]}, t);
  return {b.binary("stablehlo.atan2", im, re)};
}

// sgn(z) = z / |z|, and 0 where z == 0.
std::vector<Value> lower_complex_sgn(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  Value z = in[0];
  Value r = lower_complex_abs(ctx, in)[0];
  Value zero = b.full(b.type(r), 0);
  Value is_zero = b.compare(r, zero, Compare::kEQ);
  Value safe = b.select(is_zero, b.full(b.type(r), 1), r);
  Value q = b.div(z, b.convert(safe, b.dtype(z)));
  return {b.select(is_zero, b.full(b.type(z), 0), q)};
}

const LoweringEntry kComplexToReal[] = {
    {"complex_abs", lower_complex_abs}, {"complex_angle", lower_complex_angle}, {"complex_sgn", lower_complex_sgn},
};
TPU_REGISTER_LOWERINGS(kComplexToReal);

}  // namespace
}  // namespace tpu::lowering
