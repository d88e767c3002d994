// Binary and ternary pointwise ops: arithmetic, comparisons, logic, and PyTorch's own
// definitions of remainder, floor division, lerp, fmax/fmin, copysign, ...
// Operands arrive in the op's compute dtype and are broadcast by the table wrapper.
#include <cmath>

#include "lowering/cast.h"
#include "lowering/hlo_names.h"
#include "lowering/pointwise.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

bool is_bool(Builder& b, Value x) { return b.dtype(x) == ElementType::kBool; }
bool floating(Builder& b, Value x) { return is_floating(b.dtype(x)); }

// Optional third input `alpha` scales the second operand (add/sub).
Value scaled(Builder& b, const Args& a) { return a.size() > 2 ? b.mul(a[1], a[2]) : a[1]; }

// PyTorch's floor division of floating values (ATen's div_floor_floating).
Value floor_divide_float(Builder& b, Value x, Value y) {
  Value zero = scalar_like(b, x, 0);
  Value one = scalar_like(b, x, 1);
  Value mod = b.binary("stablehlo.remainder", x, y);
  Value div = b.div(b.sub(x, mod), y);
  Value signs_differ = b.compare(b.compare(y, zero, Compare::kLT), b.compare(mod, zero, Compare::kLT), Compare::kNE);
  div = b.select(logical_and(b, b.compare(mod, zero, Compare::kNE), signs_differ), b.sub(div, one), div);
  Value floordiv = b.unary("stablehlo.floor", div);
  floordiv = b.select(b.compare(b.sub(div, floordiv), scalar_like(b, x, 0.5), Compare::kGT), b.add(floordiv, one),
                      floordiv);
  Value true_div = b.div(x, y);
  Value signed_zero = b.mul(b.unary("stablehlo.sign", true_div), zero);
  floordiv = b.select(b.compare(div, zero, Compare::kEQ), signed_zero, floordiv);
  return b.select(b.compare(y, zero, Compare::kEQ), true_div, floordiv);
}

Value floor_divide_int(Builder& b, Value x, Value y) {
  Value zero = scalar_like(b, x, 0);
  Value q = b.div(x, y);
  Value inexact = b.compare(b.binary("stablehlo.remainder", x, y), zero, Compare::kNE);
  Value signs_differ = b.compare(b.compare(x, zero, Compare::kLT), b.compare(y, zero, Compare::kLT), Compare::kNE);
  return b.select(logical_and(b, inexact, signs_differ), b.sub(q, scalar_like(b, x, 1)), q);
}

Value floor_divide(Builder& b, Value x, Value y) {
  return floating(b, x) ? floor_divide_float(b, x, y) : floor_divide_int(b, x, y);
}

// div: attrs rounding_mode 0 = true division, 1 = trunc, 2 = floor.
Value div(Context& ctx, const Args& a) {
  auto& b = ctx.b;
  const int64_t mode = ctx.attrs.get_int("rounding_mode", 0);
  if (mode == 2) return floor_divide(b, a[0], a[1]);
  Value q = b.div(a[0], a[1]);
  return mode == 1 ? trunc_value(b, q) : q;
}

// Python's modulo: the result takes the divisor's sign.
Value remainder(Builder& b, Value x, Value y) {
  Value zero = scalar_like(b, x, 0);
  Value r = b.binary("stablehlo.remainder", x, y);
  Value fix = logical_and(b, b.compare(r, zero, Compare::kNE),
                          b.compare(b.compare(r, zero, Compare::kLT), b.compare(y, zero, Compare::kLT), Compare::kNE));
  return b.select(fix, b.add(r, y), r);
}

// pow(x, e): attrs exponent_kind 0 = general, 1 = zero, 2 = one, 3 = square, 4 = sqrt,
// 5 = reciprocal (exact forms ATen also uses for scalar exponents).
Value power(Context& ctx, const Args& a) {
  auto& b = ctx.b;
  switch (ctx.attrs.get_int("exponent_kind", 0)) {
    case 1: return scalar_like(b, a[0], 1);
    case 2: return a[0];
    case 3: return b.mul(a[0], a[0]);
    case 4: return b.unary("stablehlo.sqrt", a[0]);
    case 5: return b.div(scalar_like(b, a[0], 1), a[0]);
    default: return b.binary("stablehlo.power", a[0], a[1]);
  }
}

// max/min ignoring NaN (fmax/fmin).
Value nan_ignoring(Builder& b, Value x, Value y, bool take_max) {
  Value m = take_max ? b.max(x, y) : b.min(x, y);
  if (!floating(b, x)) return m;
  return b.select(is_nan(b, x), y, b.select(is_nan(b, y), x, m));
}

Value signbit_of(Builder& b, Value x) {
  const ElementType t = b.dtype(x);
  const ElementType as_int = element_size(t) == 8 ? ElementType::kI64
                             : element_size(t) == 4 ? ElementType::kI32 : ElementType::kI16;
  Value bits = b.bitcast_convert(x, hlo::TensorType{as_int, b.dims(x)});
  return b.compare(bits, scalar_like(b, bits, 0), Compare::kLT);
}

// gcd of integers by Euclid's algorithm on every element at once: |a|, |b|, then (b % a, a)
// while any a is non-zero (ATen's order of operands, so gcd(0, 0) = 0).
Value gcd(Builder& b, Value x, Value y) {
  const TensorType t = b.type(x);
  Dims all;
  for (int64_t d = 0; d < t.rank(); ++d) all.push_back(d);
  auto out = b.while_loop(
      {abs_real(b, x), abs_real(b, y)},
      [&](const Args& s) {
        Value live = b.compare(s[0], scalar_like(b, s[0], 0), Compare::kNE);
        return Args{b.reduce(live, b.constant_int(ElementType::kBool, 0), all, ReduceKind::kOr)};
      },
      [&](const Args& s) {
        Value zero = b.compare(s[0], scalar_like(b, s[0], 0), Compare::kEQ);
        Value divisor = b.select(zero, scalar_like(b, s[0], 1), s[0]);
        Value next = b.select(zero, s[0], b.binary("stablehlo.remainder", s[1], divisor));
        return Args{next, b.select(zero, s[1], s[0])};
      });
  return out[1];
}

// lcm = |a / gcd * b| (0 where the gcd is 0).
Value lcm(Builder& b, Value x, Value y) {
  Value g = gcd(b, x, y);
  Value zero = b.compare(g, scalar_like(b, g, 0), Compare::kEQ);
  Value q = b.div(x, b.select(zero, scalar_like(b, g, 1), g));
  return b.select(zero, scalar_like(b, g, 0), abs_real(b, b.mul(q, y)));
}

Value compare(Builder& b, const Args& a, Compare c) { return b.compare(a[0], a[1], c); }

Value shift(Builder& b, Value x, Value s, bool left) {
  if (left) return b.binary("stablehlo.shift_left", x, s);
  return b.binary(is_unsigned(b.dtype(x)) ? "stablehlo.shift_right_logical" : "stablehlo.shift_right_arithmetic", x, s);
}

const PointwiseEntry kBinary[] = {
    {"add", [](Context& c, const Args& a) {
       if (is_bool(c.b, a[0])) return logical_or(c.b, a[0], a.size() > 2 ? logical_and(c.b, a[1], a[2]) : a[1]);
       return c.b.add(a[0], scaled(c.b, a));
     }},
    {"sub", [](Context& c, const Args& a) { return c.b.sub(a[0], scaled(c.b, a)); }},
    {"mul", [](Context& c, const Args& a) {
       return is_bool(c.b, a[0]) ? logical_and(c.b, a[0], a[1]) : c.b.mul(a[0], a[1]);
     }},
    {"div", div},
    {"neg", [](Context& c, const Args& a) { return c.b.neg(a[0]); }},
    // rsub(self, other, alpha) = other - alpha * self
    {"rsub", [](Context& c, const Args& a) { return c.b.sub(a[1], c.b.mul(a[0], a[2])); }},
    {"relu", [](Context& c, const Args& a) { return c.b.max(a[0], scalar_like(c.b, a[0], 0)); }},
    {"pow", power},
    {"remainder", [](Context& c, const Args& a) { return remainder(c.b, a[0], a[1]); }},
    {"fmod", [](Context& c, const Args& a) { return c.b.binary("stablehlo.remainder", a[0], a[1]); }},
    {"floor_divide", [](Context& c, const Args& a) { return floor_divide(c.b, a[0], a[1]); }},
    {"atan2", [](Context& c, const Args& a) { return c.b.binary("stablehlo.atan2", a[0], a[1]); }},
    {"maximum", [](Context& c, const Args& a) {
       return is_bool(c.b, a[0]) ? logical_or(c.b, a[0], a[1]) : c.b.max(a[0], a[1]);
     }},
    {"minimum", [](Context& c, const Args& a) {
       return is_bool(c.b, a[0]) ? logical_and(c.b, a[0], a[1]) : c.b.min(a[0], a[1]);
     }},
    {"fmax", [](Context& c, const Args& a) { return nan_ignoring(c.b, a[0], a[1], true); }},
    {"fmin", [](Context& c, const Args& a) { return nan_ignoring(c.b, a[0], a[1], false); }},
    {"copysign", [](Context& c, const Args& a) {
       Value mag = c.b.unary("stablehlo.abs", a[0]);
       return c.b.select(signbit_of(c.b, a[1]), c.b.neg(mag), mag);
     }},
    {"hypot", [](Context& c, const Args& a) {
       return c.b.unary("stablehlo.sqrt", c.b.add(c.b.mul(a[0], a[0]), c.b.mul(a[1], a[1])));
     }},
    {"logaddexp", [](Context& c, const Args& a) { return log_add_exp(c.b, a[0], a[1]); }},
    {"logaddexp2", [](Context& c, const Args& a) { return log_add_exp(c.b, a[0], a[1], 2.0); }},
    {"xlogy", [](Context& c, const Args& a) {
       auto& b = c.b;
       Value r = b.mul(a[0], b.unary("stablehlo.log", a[1]));
       r = b.select(b.compare(a[0], scalar_like(b, a[0], 0), Compare::kEQ), scalar_like(b, r, 0), r);
       return b.select(is_nan(b, a[1]), a[1], r);
     }},
    {"nextafter", [](Context& c, const Args& a) { return c.b.binary("chlo.next_after", a[0], a[1]); }},
    {"heaviside", [](Context& c, const Args& a) {
       auto& b = c.b;
       Value zero = scalar_like(b, a[0], 0);
       Value step = cast(b, b.compare(a[0], zero, Compare::kGT), b.dtype(a[0]));
       return b.select(b.compare(a[0], zero, Compare::kEQ), a[1], step);
     }},
    {"gcd", [](Context& c, const Args& a) { return gcd(c.b, a[0], a[1]); }},
    {"lcm", [](Context& c, const Args& a) { return lcm(c.b, a[0], a[1]); }},
    {"bitwise_and", [](Context& c, const Args& a) { return logical_and(c.b, a[0], a[1]); }},
    {"bitwise_or", [](Context& c, const Args& a) { return logical_or(c.b, a[0], a[1]); }},
    {"bitwise_xor", [](Context& c, const Args& a) { return c.b.binary("stablehlo.xor", a[0], a[1]); }},
    {"bitwise_left_shift", [](Context& c, const Args& a) { return shift(c.b, a[0], a[1], true); }},
    {"bitwise_right_shift", [](Context& c, const Args& a) { return shift(c.b, a[0], a[1], false); }},
    {"logical_and", [](Context& c, const Args& a) { return logical_and(c.b, a[0], a[1]); }},
    {"logical_or", [](Context& c, const Args& a) { return logical_or(c.b, a[0], a[1]); }},
    {"logical_xor", [](Context& c, const Args& a) { return c.b.binary("stablehlo.xor", a[0], a[1]); }},
    {"eq", [](Context& c, const Args& a) { return compare(c.b, a, Compare::kEQ); }},
    {"ne", [](Context& c, const Args& a) { return compare(c.b, a, Compare::kNE); }},
    {"lt", [](Context& c, const Args& a) { return compare(c.b, a, Compare::kLT); }},
    {"le", [](Context& c, const Args& a) { return compare(c.b, a, Compare::kLE); }},
    {"gt", [](Context& c, const Args& a) { return compare(c.b, a, Compare::kGT); }},
    {"ge", [](Context& c, const Args& a) { return compare(c.b, a, Compare::kGE); }},
    // lerp(start, end, weight): ATen's two-sided formula keeps lerp(a, b, 1) == b exactly.
    {"lerp", [](Context& c, const Args& a) {
       auto& b = c.b;
       Value start = a[0], end = a[1], w = a[2];
       Value diff = b.sub(end, start);
       Value low = b.add(start, b.mul(w, diff));
       Value high = b.sub(end, b.mul(diff, b.sub(scalar_like(b, w, 1), w)));
       Value m = magnitude(b, w);
       return b.select(b.compare(m, scalar_like(b, m, 0.5), Compare::kLT), low, high);
     }},
    {"addcmul", [](Context& c, const Args& a) { return c.b.add(a[0], c.b.mul(a[3], c.b.mul(a[1], a[2]))); }},
    {"addcdiv", [](Context& c, const Args& a) { return c.b.add(a[0], c.b.mul(a[3], c.b.div(a[1], a[2]))); }},
    {"where", [](Context& c, const Args& a) { return c.b.select(cast(c.b, a[0], ElementType::kBool), a[1], a[2]); }},
    // masked_fill(self, mask, value)
    {"masked_fill", [](Context& c, const Args& a) { return c.b.select(cast(c.b, a[1], ElementType::kBool), a[2], a[0]); }},
};

TPU_REGISTER_POINTWISE(kBinary);

}  // namespace
}  // namespace tpu::lowering
