// Elementwise arithmetic: operands arrive in the op's compute dtype (type promotion is done by
// the caller, once, with PyTorch's rules); shapes are broadcast here.
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using hlo::Builder;
using hlo::Compare;
using hlo::Value;

// Optional third input `alpha` scales the second operand (add/sub).
Value scaled_rhs(Builder& b, const std::vector<Value>& in, Value rhs) {
  if (in.size() < 3) return rhs;
  return b.mul(rhs, b.broadcast_to(in[2], b.dims(rhs)));
}

std::vector<Value> lower_add(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1]});
  if (b.dtype(v[0]) == ElementType::kBool) return {b.binary("stablehlo.or", v[0], v[1])};
  return {b.add(v[0], scaled_rhs(b, in, v[1]))};
}

std::vector<Value> lower_sub(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1]});
  return {b.sub(v[0], scaled_rhs(b, in, v[1]))};
}

std::vector<Value> lower_mul(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1]});
  if (b.dtype(v[0]) == ElementType::kBool) return {b.binary("stablehlo.and", v[0], v[1])};
  return {b.mul(v[0], v[1])};
}

// PyTorch's floor division of floating values (ATen's div_floor_floating), which differs from
// floor(a / b) in rounding corner cases.
Value floor_divide_float(Builder& b, Value x, Value y) {
  Value zero = full_like(b, x, 0);
  Value one = full_like(b, x, 1);
  Value mod = b.binary("stablehlo.remainder", x, y);
  Value div = b.div(b.sub(x, mod), y);
  Value mod_nonzero = b.compare(mod, zero, Compare::kNE);
  Value signs_differ = b.compare(b.compare(y, zero, Compare::kLT), b.compare(mod, zero, Compare::kLT),
                                 Compare::kNE);
  div = b.select(b.binary("stablehlo.and", mod_nonzero, signs_differ), b.sub(div, one), div);
  Value floordiv = b.unary("stablehlo.floor", div);
  Value half = full_like(b, x, 0.5);
  floordiv = b.select(b.compare(b.sub(div, floordiv), half, Compare::kGT), b.add(floordiv, one), floordiv);
  // A zero quotient keeps the sign of x / y.
  Value true_div = b.div(x, y);
  Value signed_zero = b.emit("stablehlo.multiply", {b.unary("stablehlo.sign", true_div), zero}, b.type(x));
  floordiv = b.select(b.compare(div, zero, Compare::kEQ), signed_zero, floordiv);
  // Division by zero gives x / 0 (inf or nan), as in PyTorch.
  return b.select(b.compare(y, zero, Compare::kEQ), true_div, floordiv);
}

Value floor_divide_int(Builder& b, Value x, Value y) {
  Value zero = full_like(b, x, 0);
  Value q = b.div(x, y);
  Value r = b.binary("stablehlo.remainder", x, y);
  Value inexact = b.compare(r, zero, Compare::kNE);
  Value signs_differ = b.compare(b.compare(x, zero, Compare::kLT), b.compare(y, zero, Compare::kLT),
                                 Compare::kNE);
  return b.select(b.binary("stablehlo.and", inexact, signs_differ), b.sub(q, full_like(b, x, 1)), q);
}

// div: attrs rounding_mode 0 = true division, 1 = trunc, 2 = floor.
std::vector<Value> lower_div(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1]});
  const int64_t mode = ctx.attrs.get_int("rounding_mode", 0);
  const bool floating = is_floating(b.dtype(v[0]));
  if (mode == 2) return {floating ? floor_divide_float(b, v[0], v[1]) : floor_divide_int(b, v[0], v[1])};
  Value q = b.div(v[0], v[1]);
  if (mode == 1 && floating) {
    // trunc: round toward zero
    Value zero = full_like(b, q, 0);
    q = b.select(b.compare(q, zero, Compare::kLT), b.unary("stablehlo.ceil", q),
                 b.unary("stablehlo.floor", q));
  }
  return {q};
}

std::vector<Value> lower_neg(Context& ctx, const std::vector<Value>& in) {
  return {ctx.b.neg(in[0])};
}

std::vector<Value> lower_relu(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  return {b.max(in[0], full_like(b, in[0], 0))};
}

// threshold_backward(grad, self, threshold): grad where self > threshold, else 0.
std::vector<Value> lower_threshold_backward(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1]});
  Value t = b.broadcast_to(in[2], b.dims(v[1]));
  Value keep = b.compare(v[1], t, Compare::kGT);
  return {b.select(keep, v[0], full_like(b, v[0], 0))};
}

TPU_REGISTER_LOWERING("add", lower_add);
TPU_REGISTER_LOWERING("sub", lower_sub);
TPU_REGISTER_LOWERING("mul", lower_mul);
TPU_REGISTER_LOWERING("div", lower_div);
TPU_REGISTER_LOWERING("neg", lower_neg);
TPU_REGISTER_LOWERING("relu", lower_relu);
TPU_REGISTER_LOWERING("threshold_backward", lower_threshold_backward);

}  // namespace
}  // namespace tpu::lowering

namespace tpu::lowering {
namespace {

// pow(x, e) with e broadcast. Integer exponents 0, 1, 2 and 0.5 use exact forms (as ATen does).
// attrs: exponent_kind 0 = general, 1 = zero, 2 = one, 3 = square, 4 = sqrt, 5 = reciprocal.
std::vector<hlo::Value> lower_pow(Context& ctx, const std::vector<hlo::Value>& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1]});
  switch (ctx.attrs.get_int("exponent_kind", 0)) {
    case 1: return {full_like(b, v[0], 1)};
    case 2: return {v[0]};
    case 3: return {b.mul(v[0], v[0])};
    case 4: return {b.unary("stablehlo.sqrt", v[0])};
    case 5: return {b.div(full_like(b, v[0], 1), v[0])};
    default: return {b.binary("stablehlo.power", v[0], v[1])};
  }
}

TPU_REGISTER_LOWERING("pow", lower_pow);

}  // namespace
}  // namespace tpu::lowering
