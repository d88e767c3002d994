#include "lowering/pointwise.h"

#include <cmath>

#include "lowering/shape_helpers.h"

namespace tpu::lowering {

bool register_pointwise(const PointwiseEntry* entries, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const PointwiseFn fn = entries[i].fn;
    register_lowering(entries[i].name, [fn](Context& ctx, const std::vector<hlo::Value>& in) {
      return std::vector<hlo::Value>{fn(ctx, broadcast_all(ctx.b, in))};
    });
  }
  return true;
}

hlo::Value scalar_like(hlo::Builder& b, hlo::Value like, double value) { return b.full(b.type(like), value); }

hlo::Value is_nan(hlo::Builder& b, hlo::Value x) { return b.compare(x, x, hlo::Compare::kNE); }

hlo::Value trunc_value(hlo::Builder& b, hlo::Value x) {
  if (!is_floating(b.dtype(x))) return x;
  return b.select(b.compare(x, scalar_like(b, x, 0), hlo::Compare::kLT), b.unary("stablehlo.ceil", x),
                  b.unary("stablehlo.floor", x));
}

namespace {
hlo::TensorType part_of(hlo::Builder& b, hlo::Value x) {
  hlo::TensorType t = b.type(x);
  t.dtype = complex_part(t.dtype);
  return t;
}
}  // namespace

hlo::Value abs_real(hlo::Builder& b, hlo::Value x) {
  const ElementType t = b.dtype(x);
  return (t == ElementType::kBool || is_unsigned(t)) ? x : b.unary("stablehlo.abs", x);
}

hlo::Value magnitude(hlo::Builder& b, hlo::Value x) { return b.emit("stablehlo.abs", {x}, part_of(b, x)); }

hlo::Value real_part(hlo::Builder& b, hlo::Value x) {
  return is_complex(b.dtype(x)) ? b.emit("stablehlo.real", {x}, part_of(b, x)) : x;
}

hlo::Value imag_part(hlo::Builder& b, hlo::Value x) {
  return is_complex(b.dtype(x)) ? b.emit("stablehlo.imag", {x}, part_of(b, x)) : b.full(b.type(x), 0);
}

hlo::Value conjugate(hlo::Builder& b, hlo::Value x) {
  if (!is_complex(b.dtype(x))) return x;
  return b.emit("stablehlo.complex", {real_part(b, x), b.neg(imag_part(b, x))}, b.type(x));
}

hlo::Value is_finite(hlo::Builder& b, hlo::Value x) {
  const hlo::TensorType flags{ElementType::kBool, b.dims(x)};
  if (is_complex(b.dtype(x))) return logical_and(b, is_finite(b, real_part(b, x)), is_finite(b, imag_part(b, x)));
  return is_floating(b.dtype(x)) ? b.emit("stablehlo.is_finite", {x}, flags) : b.full(flags, 1);
}

namespace {
// ATen's complex log-add-exp: min and max by real part; log1p(exp(min - max)) + max, except
// NaN anywhere (NaN in both parts), both real parts -inf (min) and both +inf (log of the sum).
hlo::Value complex_log_add_exp(hlo::Builder& b, hlo::Value x, hlo::Value y) {
  using hlo::Compare;
  hlo::Value x_low = b.compare(real_part(b, x), real_part(b, y), Compare::kLT);
  hlo::Value low = b.select(x_low, x, y), high = b.select(x_low, y, x);
  hlo::Value low_re = real_part(b, low), high_re = real_part(b, high);
  hlo::Value general = b.add(b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", b.sub(low, high))), high);
  hlo::Value both_inf = logical_and(b, logical_not(b, is_finite(b, low_re)), b.compare(low_re, high_re, Compare::kEQ));
  hlo::Value both_pos_inf = b.unary("stablehlo.log", b.add(b.unary("stablehlo.exponential", low), b.unary("stablehlo.exponential", high)));
  hlo::Value r = b.select(both_inf, b.select(b.compare(low_re, scalar_like(b, low_re, 0), Compare::kLT), low, both_pos_inf), general);
  hlo::Value nan = scalar_like(b, low_re, NAN);
  hlo::Value nan_both = b.emit("stablehlo.complex", {nan, nan}, b.type(x));
  return b.select(logical_or(b, is_nan(b, x), is_nan(b, y)), nan_both, r);
}
}  // namespace

hlo::Value log_add_exp(hlo::Builder& b, hlo::Value x, hlo::Value y, double base) {
  if (is_complex(b.dtype(x))) return complex_log_add_exp(b, x, y);
  hlo::Value m = b.max(x, y);
  hlo::Value d = b.unary("stablehlo.abs", b.sub(x, y));
  hlo::Value r;
  if (base == 2.0) {
    hlo::Value ln2 = scalar_like(b, x, M_LN2);
    r = b.add(m, b.div(b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", b.neg(b.mul(d, ln2)))), ln2));
  } else {
    r = b.add(m, b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", b.neg(d))));
  }
  // Equal infinities: x - y is nan, the answer is x.
  return b.select(logical_and(b, b.compare(x, y, hlo::Compare::kEQ), logical_not(b, is_finite(b, x))), x, r);
}

hlo::Value logical_and(hlo::Builder& b, hlo::Value x, hlo::Value y) { return b.binary("stablehlo.and", x, y); }
hlo::Value logical_or(hlo::Builder& b, hlo::Value x, hlo::Value y) { return b.binary("stablehlo.or", x, y); }
hlo::Value logical_not(hlo::Builder& b, hlo::Value x) { return b.unary("stablehlo.not", x); }

bool has_arg(const Attrs& attrs, int index) { return (attrs.get_int("present", 0) >> index) & 1; }

}  // namespace tpu::lowering
