// Unary math: one table entry per op, with PyTorch's semantics where XLA's differ (sign of
// NaN, trunc, integer abs/ceil/floor, ...). Inputs arrive in the op's compute dtype.
#include <cmath>
#include <limits>

#include "lowering/cast.h"
#include "lowering/hlo_names.h"
#include "lowering/pointwise.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

bool floating(Builder& b, Value x) { return is_floating(b.dtype(x)); }

Value op1(Builder& b, const char* name, Value x) { return b.unary(name, x); }

// Rounding ops are the identity on integers and bool.
Value rounding(Builder& b, const char* name, Value x) { return floating(b, x) ? b.unary(name, x) : x; }

// ATen's sign: (0 < x) - (x < 0), so sign(nan) == 0.
Value sign_value(Builder& b, Value x) {
  const ElementType t = b.dtype(x);
  if (t == ElementType::kBool) return x;
  Value zero = scalar_like(b, x, 0);
  Value pos = cast(b, b.compare(zero, x, Compare::kLT), t);
  if (is_unsigned(t)) return pos;
  return b.sub(pos, cast(b, b.compare(x, zero, Compare::kLT), t));
}

Value signbit_value(Builder& b, Value x) {
  const ElementType t = b.dtype(x);
  if (t == ElementType::kBool || is_unsigned(t)) return b.full(hlo::TensorType{ElementType::kBool, b.dims(x)}, 0);
  if (!floating(b, x)) return b.compare(x, scalar_like(b, x, 0), Compare::kLT);
  // The sign bit, so -0.0 and negative NaNs count as negative.
  const ElementType as_int = element_size(t) == 8 ? ElementType::kI64
                             : element_size(t) == 4 ? ElementType::kI32 : ElementType::kI16;
  Value bits = b.bitcast_convert(x, hlo::TensorType{as_int, b.dims(x)});
  return b.compare(bits, scalar_like(b, bits, 0), Compare::kLT);
}

// polygamma(n, x) for n >= 1. chlo.polygamma is only accurate for x > 0, so negative x uses the
// reflection psi_n(x) = (-1)^n psi_n(1 - x) - pi^(n+1) P_n(cot(pi x)), where d^n/dx^n cot(pi x) =
// pi^n P_n(cot(pi x)), P_0(c) = c, P_{k+1}(c) = -(1 + c^2) P_k'(c). Poles (x a non-positive integer) give
// (-1)^(n+1) inf, as ATen's zeta-based kernel does. Low-precision floats compute in f32.
Value polygamma_value(Builder& b, int64_t n, Value x_in) {
  const ElementType t = b.dtype(x_in);
  const bool narrow = element_size(t) < 4;
  Value x = narrow ? cast(b, x_in, ElementType::kF32) : x_in;
  Value nv = scalar_like(b, x, static_cast<double>(n));
  Value direct = b.binary("chlo.polygamma", nv, x);
  if (n < 1) {  // digamma: ATen gives -inf at +0 and +inf at -0, where chlo gives NaN
    const double inf = std::numeric_limits<double>::infinity();
    Value at_zero = b.select(signbit_value(b, x), scalar_like(b, x, inf), scalar_like(b, x, -inf));
    Value r = b.select(b.compare(x, scalar_like(b, x, 0.0), Compare::kEQ), at_zero, direct);
    return narrow ? cast(b, r, t) : r;
  }
  std::vector<double> poly = {0.0, 1.0};  // coefficients of P_k, lowest degree first
  for (int64_t k = 0; k < n; ++k) {
    std::vector<double> next(poly.size() + 1, 0.0);
    for (size_t i = 1; i < poly.size(); ++i) {  // -(1 + c^2) * i * a_i c^(i-1)
      next[i - 1] -= static_cast<double>(i) * poly[i];
      next[i + 1] -= static_cast<double>(i) * poly[i];
    }
    poly = next;
  }
  Value one = scalar_like(b, x, 1.0);
  Value zero = scalar_like(b, x, 0.0);
  // ATen's trigamma takes sin of the rounded f32 product pi * x; match it. Higher orders reduce x
  // exactly to r in [-0.5, 0.5]: cot(pi r) = cos/sin near the poles (r ~ 0), and
  // tan(pi (sign(r)/2 - r)) near the zeros of cot (|r| ~ 0.5), both accurate there.
  Value c;
  if (n == 1) {
    Value angle = b.mul(x, scalar_like(b, x, M_PI));
    c = b.div(b.unary("stablehlo.cosine", angle), b.unary("stablehlo.sine", angle));
  } else {
    Value r = b.sub(x, b.unary("stablehlo.round_nearest_even", x));
    Value angle = b.mul(r, scalar_like(b, x, M_PI));
    Value near_pole = b.div(b.unary("stablehlo.cosine", angle), b.unary("stablehlo.sine", angle));
    Value half = b.mul(b.unary("stablehlo.sign", r), scalar_like(b, x, 0.5));
    Value near_zero = b.unary("chlo.tan", b.mul(b.sub(half, r), scalar_like(b, x, M_PI)));
    c = b.select(b.compare(b.unary("stablehlo.abs", r), scalar_like(b, x, 0.25), Compare::kLT), near_pole, near_zero);
  }
  Value p = scalar_like(b, x, poly.back());
  for (size_t i = poly.size() - 1; i-- > 0;) p = b.add(b.mul(p, c), scalar_like(b, x, poly[i]));
  Value mirrored = b.binary("chlo.polygamma", nv, b.sub(one, x));
  if (n % 2 == 1) mirrored = b.neg(mirrored);
  Value reflected = b.sub(mirrored, b.mul(p, scalar_like(b, x, std::pow(M_PI, static_cast<double>(n + 1)))));
  Value pole = scalar_like(b, x, (n % 2 == 1 ? 1.0 : -1.0) * std::numeric_limits<double>::infinity());
  Value nonpositive = b.compare(x, zero, Compare::kLE);
  Value is_pole = logical_and(b, nonpositive, b.compare(x, b.unary("stablehlo.floor", x), Compare::kEQ));
  Value r = b.select(nonpositive, b.select(is_pole, pole, reflected), direct);
  return narrow ? cast(b, r, t) : r;
}

Value log_base(Builder& b, Value x, double base) {
  return b.div(b.unary("stablehlo.log", x), scalar_like(b, x, std::log(base)));
}

Value round_decimals(Context& ctx, const Args& a) {
  auto& b = ctx.b;
  const int64_t d = ctx.attrs.get_int("decimals", 0);
  Value x = a[0];
  if (!floating(b, x)) return x;
  if (d == 0) return b.unary("stablehlo.round_nearest_even", x);
  const double ten_pow = std::pow(10.0, static_cast<double>(std::llabs(d)));
  Value f = scalar_like(b, x, ten_pow);
  if (d > 0) return b.div(b.unary("stablehlo.round_nearest_even", b.mul(x, f)), f);
  return b.mul(b.unary("stablehlo.round_nearest_even", b.div(x, f)), f);
}

// Max finite / lowest finite of a floating type.
double max_finite(ElementType t) {
  switch (t) {
    case ElementType::kF16: return 65504.0;
    case ElementType::kBF16: return 3.3895313892515355e38;
    case ElementType::kF32: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}

// nan_to_num(x, nan?, posinf?, neginf?): args [x, (nan), (posinf), (neginf)] (schema indices 1..3).
Value nan_to_num(Context& ctx, const Args& a) {
  auto& b = ctx.b;
  Value x = a[0];
  if (!floating(b, x)) return x;
  size_t next = 1;
  Value nan = has_arg(ctx.attrs, 1) ? a[next++] : scalar_like(b, x, 0);
  const double big = max_finite(b.dtype(x));
  Value pinf = has_arg(ctx.attrs, 2) ? a[next++] : scalar_like(b, x, big);
  Value ninf = has_arg(ctx.attrs, 3) ? a[next++] : scalar_like(b, x, -big);
  Value inf = scalar_like(b, x, INFINITY);
  Value out = b.select(is_nan(b, x), nan, x);
  out = b.select(b.compare(x, inf, Compare::kEQ), pinf, out);
  return b.select(b.compare(x, b.neg(inf), Compare::kEQ), ninf, out);
}

Value is_inf(Builder& b, Value x) {
  if (!floating(b, x) && !is_complex(b.dtype(x))) return b.full(hlo::TensorType{ElementType::kBool, b.dims(x)}, 0);
  Value m = magnitude(b, x);  // complex values: infinite when either part is
  return b.compare(m, scalar_like(b, m, INFINITY), Compare::kEQ);
}

Value sinc(Builder& b, Value x) {
  Value px = b.mul(x, scalar_like(b, x, M_PI));
  Value r = b.div(b.unary("stablehlo.sine", px), px);
  return b.select(b.compare(x, scalar_like(b, x, 0), Compare::kEQ), scalar_like(b, x, 1), r);
}

// logit(x, eps?): log(z / (1 - z)) with z = clamp(x, eps, 1 - eps) when eps is given.
Value logit(Context& ctx, const Args& a) {
  auto& b = ctx.b;
  Value z = a[0];
  if (has_arg(ctx.attrs, 1)) {
    Value eps = a[1];
    z = b.min(b.max(z, eps), b.sub(scalar_like(b, z, 1), eps));
    z = b.select(is_nan(b, a[0]), a[0], z);
  }
  return b.unary("stablehlo.log", b.div(z, b.sub(scalar_like(b, z, 1), z)));
}

Value softplus_value(Builder& b, Value x) {
  return b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", x));
}

Value gelu(Context& ctx, const Args& a) {
  auto& b = ctx.b;
  Value x = a[0];
  Value half = scalar_like(b, x, 0.5);
  if (ctx.attrs.get_string("approximate") == "tanh") {
    Value inner = b.mul(scalar_like(b, x, std::sqrt(2.0 / M_PI)),
                        b.add(x, b.mul(scalar_like(b, x, 0.044715), b.mul(x, b.mul(x, x)))));
    return b.mul(b.mul(half, x), b.add(scalar_like(b, x, 1), b.unary("stablehlo.tanh", inner)));
  }
  Value e = b.unary("chlo.erf", b.mul(x, scalar_like(b, x, M_SQRT1_2)));
  return b.mul(b.mul(x, half), b.add(scalar_like(b, x, 1), e));
}

// Clamp with optional bounds: args [x, (min), (max)] (schema indices 1, 2). As in ATen, a NaN
// in x or in a bound gives NaN (programs compile with NaN-propagating max/min: exec/executor.cc),
// and min > max gives max.
Value clamp(Context& ctx, const Args& a) {
  auto& b = ctx.b;
  Value x = a[0];
  size_t next = 1;
  if (has_arg(ctx.attrs, 1)) x = b.max(x, a[next++]);
  if (has_arg(ctx.attrs, 2)) x = b.min(x, a[next++]);
  return x;
}

// softplus(x, beta, threshold)
Value softplus(Context& ctx, const Args& a) {
  auto& b = ctx.b;
  Value x = a[0], beta = a[1], threshold = a[2];
  Value xb = b.mul(x, beta);
  return b.select(b.compare(xb, threshold, Compare::kGT), x, b.div(softplus_value(b, xb), beta));
}

// elu(x, alpha, scale, input_scale)
Value elu(Context& ctx, const Args& a) {
  auto& b = ctx.b;
  Value x = a[0], alpha = a[1], scale = a[2], input_scale = a[3];
  Value neg = b.mul(b.mul(scale, alpha), b.unary("stablehlo.exponential_minus_one", b.mul(x, input_scale)));
  return b.select(b.compare(x, scalar_like(b, x, 0), Compare::kGT), b.mul(x, scale), neg);
}

const PointwiseEntry kUnary[] = {
    {"abs", [](Context& c, const Args& a) { return abs_real(c.b, a[0]); }},
    {"exp", [](Context& c, const Args& a) { return op1(c.b, "stablehlo.exponential", a[0]); }},
    {"exp2", [](Context& c, const Args& a) { return c.b.binary("stablehlo.power", scalar_like(c.b, a[0], 2), a[0]); }},
    {"expm1", [](Context& c, const Args& a) { return op1(c.b, "stablehlo.exponential_minus_one", a[0]); }},
    {"log", [](Context& c, const Args& a) { return op1(c.b, "stablehlo.log", a[0]); }},
    {"log2", [](Context& c, const Args& a) { return log_base(c.b, a[0], 2.0); }},
    {"log10", [](Context& c, const Args& a) { return log_base(c.b, a[0], 10.0); }},
    {"log1p", [](Context& c, const Args& a) { return op1(c.b, "stablehlo.log_plus_one", a[0]); }},
    {"sqrt", [](Context& c, const Args& a) { return op1(c.b, "stablehlo.sqrt", a[0]); }},
    {"rsqrt", [](Context& c, const Args& a) { return op1(c.b, "stablehlo.rsqrt", a[0]); }},
    {"sin", [](Context& c, const Args& a) { return op1(c.b, "stablehlo.sine", a[0]); }},
    {"cos", [](Context& c, const Args& a) { return op1(c.b, "stablehlo.cosine", a[0]); }},
    {"tan", [](Context& c, const Args& a) { return op1(c.b, "chlo.tan", a[0]); }},
    {"asin", [](Context& c, const Args& a) { return op1(c.b, "chlo.asin", a[0]); }},
    {"acos", [](Context& c, const Args& a) { return op1(c.b, "chlo.acos", a[0]); }},
    {"atan", [](Context& c, const Args& a) { return op1(c.b, "chlo.atan", a[0]); }},
    {"sinh", [](Context& c, const Args& a) { return op1(c.b, "chlo.sinh", a[0]); }},
    {"cosh", [](Context& c, const Args& a) { return op1(c.b, "chlo.cosh", a[0]); }},
    {"tanh", [](Context& c, const Args& a) { return op1(c.b, "stablehlo.tanh", a[0]); }},
    {"asinh", [](Context& c, const Args& a) { return op1(c.b, "chlo.asinh", a[0]); }},
    {"acosh", [](Context& c, const Args& a) { return op1(c.b, "chlo.acosh", a[0]); }},
    {"atanh", [](Context& c, const Args& a) { return op1(c.b, "chlo.atanh", a[0]); }},
    {"sigmoid", [](Context& c, const Args& a) { return op1(c.b, "stablehlo.logistic", a[0]); }},
    {"erf", [](Context& c, const Args& a) { return op1(c.b, "chlo.erf", a[0]); }},
    {"erfc", [](Context& c, const Args& a) { return op1(c.b, "chlo.erfc", a[0]); }},
    {"erfinv", [](Context& c, const Args& a) { return op1(c.b, "chlo.erf_inv", a[0]); }},
    {"lgamma", [](Context& c, const Args& a) { return op1(c.b, "chlo.lgamma", a[0]); }},
    {"digamma", [](Context& c, const Args& a) { return polygamma_value(c.b, 0, a[0]); }},
    {"ceil", [](Context& c, const Args& a) { return rounding(c.b, "stablehlo.ceil", a[0]); }},
    {"floor", [](Context& c, const Args& a) { return rounding(c.b, "stablehlo.floor", a[0]); }},
    {"round", round_decimals},
    {"trunc", [](Context& c, const Args& a) { return trunc_value(c.b, a[0]); }},
    {"frac", [](Context& c, const Args& a) { return c.b.sub(a[0], trunc_value(c.b, a[0])); }},
    {"sign", [](Context& c, const Args& a) { return sign_value(c.b, a[0]); }},
    {"signbit", [](Context& c, const Args& a) { return signbit_value(c.b, a[0]); }},
    {"reciprocal", [](Context& c, const Args& a) { return c.b.div(scalar_like(c.b, a[0], 1), a[0]); }},
    {"isnan", [](Context& c, const Args& a) { return is_nan(c.b, a[0]); }},
    {"isinf", [](Context& c, const Args& a) { return is_inf(c.b, a[0]); }},
    {"isposinf", [](Context& c, const Args& a) {
       return floating(c.b, a[0]) ? c.b.compare(a[0], scalar_like(c.b, a[0], INFINITY), Compare::kEQ)
                                  : c.b.full(hlo::TensorType{ElementType::kBool, c.b.dims(a[0])}, 0);
     }},
    {"isneginf", [](Context& c, const Args& a) {
       return floating(c.b, a[0]) ? c.b.compare(a[0], scalar_like(c.b, a[0], -INFINITY), Compare::kEQ)
                                  : c.b.full(hlo::TensorType{ElementType::kBool, c.b.dims(a[0])}, 0);
     }},
    {"isfinite", [](Context& c, const Args& a) { return is_finite(c.b, a[0]); }},
    {"bitwise_not", [](Context& c, const Args& a) { return logical_not(c.b, a[0]); }},
    {"logical_not", [](Context& c, const Args& a) { return logical_not(c.b, cast(c.b, a[0], ElementType::kBool)); }},
    {"nan_to_num", nan_to_num},
    {"sinc", [](Context& c, const Args& a) { return sinc(c.b, a[0]); }},
    {"logit", logit},
    {"angle", [](Context& c, const Args& a) {
       Value x = a[0];
       Value r = c.b.select(c.b.compare(x, scalar_like(c.b, x, 0), Compare::kLT), scalar_like(c.b, x, M_PI),
                            scalar_like(c.b, x, 0));
       return c.b.select(is_nan(c.b, x), x, r);
     }},
    // activations
    {"gelu", gelu},
    {"silu", [](Context& c, const Args& a) { return c.b.mul(a[0], op1(c.b, "stablehlo.logistic", a[0])); }},
    {"mish", [](Context& c, const Args& a) {
       return c.b.mul(a[0], op1(c.b, "stablehlo.tanh", softplus_value(c.b, a[0])));
     }},
    {"softplus", softplus},
    {"elu", elu},
    {"leaky_relu", [](Context& c, const Args& a) {
       return c.b.select(c.b.compare(a[0], scalar_like(c.b, a[0], 0), Compare::kGT), a[0], c.b.mul(a[0], a[1]));
     }},
    {"hardtanh", [](Context& c, const Args& a) { return c.b.min(c.b.max(a[0], a[1]), a[2]); }},
    {"hardsigmoid", [](Context& c, const Args& a) {
       auto& b = c.b;
       Value x = a[0];
       return b.div(b.min(b.max(b.add(x, scalar_like(b, x, 3)), scalar_like(b, x, 0)), scalar_like(b, x, 6)),
                    scalar_like(b, x, 6));
     }},
    {"hardswish", [](Context& c, const Args& a) {
       auto& b = c.b;
       Value x = a[0];
       Value r6 = b.min(b.max(b.add(x, scalar_like(b, x, 3)), scalar_like(b, x, 0)), scalar_like(b, x, 6));
       return b.div(b.mul(x, r6), scalar_like(b, x, 6));
     }},
    {"softshrink", [](Context& c, const Args& a) {
       auto& b = c.b;
       Value x = a[0], l = a[1];
       Value zero = scalar_like(b, x, 0);
       Value r = b.select(b.compare(x, l, Compare::kGT), b.sub(x, l), zero);
       return b.select(b.compare(x, b.neg(l), Compare::kLT), b.add(x, l), r);
     }},
    {"hardshrink", [](Context& c, const Args& a) {
       auto& b = c.b;
       Value x = a[0], l = a[1];
       // ATen zeroes -l <= x <= l, so a NaN x stays NaN.
       Value inside = logical_and(b, b.compare(x, b.neg(l), Compare::kGE), b.compare(x, l, Compare::kLE));
       return b.select(inside, scalar_like(b, x, 0), x);
     }},
    {"threshold", [](Context& c, const Args& a) {  // ATen: x <= threshold ? value : x (NaN stays)
       return c.b.select(c.b.compare(a[0], a[1], Compare::kLE), a[2], a[0]);
     }},
    {"clamp", clamp},
    {"clamp_min", [](Context& c, const Args& a) { return c.b.max(a[0], a[1]); }},
    {"clamp_max", [](Context& c, const Args& a) { return c.b.min(a[0], a[1]); }},
    // polygamma(n, x): attrs n
    {"polygamma", [](Context& c, const Args& a) {
       return polygamma_value(c.b, c.attrs.get_int("n"), a[0]);
     }},
    {"zeta", [](Context& c, const Args& a) { return c.b.binary("chlo.zeta", a[0], a[1]); }},
    {"log_sigmoid", [](Context& c, const Args& a) {
       auto& b = c.b;
       Value x = a[0];
       Value neg_abs = b.neg(b.unary("stablehlo.abs", x));
       return b.sub(b.min(x, scalar_like(b, x, 0)), b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", neg_abs)));
     }},
};

TPU_REGISTER_POINTWISE(kUnary);

}  // namespace
}  // namespace tpu::lowering
