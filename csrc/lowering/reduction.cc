// Reductions over dimensions (sum, mean, prod, amax/amin, all/any, var/std, norms, arg- and
// value+index reductions), scans (cumsum, cumprod, cummax, cummin) and softmax. Inputs arrive
// in the accumulation dtype the aten layer chose; results are cast to attrs.out_dtype where
// given.
#include <cmath>
#include <string>
#include <limits>

#include "lowering/cast.h"
#include "lowering/hlo_names.h"
#include "lowering/pointwise.h"
#include "lowering/registry.h"
#include "lowering/scan.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

double lowest(ElementType t) {
  switch (t) {
    case ElementType::kBool: return 0;
    case ElementType::kI8: return -128;
    case ElementType::kI16: return -32768;
    case ElementType::kI32: return std::numeric_limits<int32_t>::min();
    case ElementType::kI64: return static_cast<double>(std::numeric_limits<int64_t>::min());
    case ElementType::kU8: case ElementType::kU32: case ElementType::kU64: return 0;
    default: return -INFINITY;
  }
}

double highest(ElementType t) {
  switch (t) {
    case ElementType::kBool: return 1;
    case ElementType::kI8: return 127;
    case ElementType::kI16: return 32767;
    case ElementType::kI32: return std::numeric_limits<int32_t>::max();
    case ElementType::kI64: return static_cast<double>(std::numeric_limits<int64_t>::max());
    case ElementType::kU8: return 255;
    case ElementType::kU32: return std::numeric_limits<uint32_t>::max();
    case ElementType::kU64: return static_cast<double>(std::numeric_limits<uint64_t>::max());
    default: return INFINITY;
  }
}

// The reduce init for `kind` over values of type t.
Value init_for(Builder& b, ElementType t, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: case ReduceKind::kOr: return b.constant(t, 0);
    case ReduceKind::kProd: case ReduceKind::kAnd: return b.constant(t, 1);
    case ReduceKind::kMax:
      return t == ElementType::kI64 ? b.constant_int(t, std::numeric_limits<int64_t>::min()) : b.constant(t, lowest(t));
    case ReduceKind::kMin:
      return t == ElementType::kI64 ? b.constant_int(t, std::numeric_limits<int64_t>::max()) : b.constant(t, highest(t));
  }
  return b.constant(t, 0);
}

Value reduce(Builder& b, Value x, const Dims& dims, ReduceKind kind) {
  return b.reduce(x, init_for(b, b.dtype(x), kind), dims, kind);
}

// keepdim and the cast to out_dtype (when the aten layer asked for one).
Value finish(Context& ctx, Value reduced, const Dims& input_dims, const Dims& dims) {
  auto& b = ctx.b;
  if (ctx.attrs.get_bool("keepdim", false)) reduced = keep_dims(b, reduced, input_dims, dims);
  if (ctx.attrs.has("out_dtype")) reduced = cast(b, reduced, ctx.attrs.get_dtype("out_dtype"));
  return reduced;
}

int64_t count_of(Builder& b, Value x, const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= b.dims(x)[d];
  return n;
}

// A zero sum is +0.0: ATen adds into an accumulator that starts at +0.0, while XLA may drop the
// init of a reduction over one element (or none) and keep a -0.0. (max/min reductions propagate
// NaN natively: programs compile without XLA's fast min/max, exec/executor.cc.)
Value sum_zero_sign(Builder& b, Value sum) {
  if (!is_floating(b.dtype(sum))) return sum;
  Value zero = b.full(b.type(sum), 0);
  return b.select(b.compare(sum, zero, Compare::kEQ), zero, sum);
}

// amax/amin run by ATen's kernel inside the program (host_aten/extreme_kernel.h): the dims and
// the kind as the custom call's scalar attributes.
Value host_extreme(Builder& b, Value x, const Dims& dims, bool want_max) {
  std::string config = "call_target_name = \"torch_tpu_extreme\", api_version = 4 : i32, backend_config = {";
  config += "ndims = " + std::to_string(dims.size()) + " : i64, ";
  for (size_t i = 0; i < dims.size(); ++i) {
    config += "dim" + std::to_string(i) + " = " + std::to_string(dims[i]) + " : i64, ";
  }
  config += "max = " + std::string(want_max ? "1" : "0") + " : i64}";
  const TensorType result{b.dtype(x), Builder::reduce_result_dims(b.dims(x), dims)};
  return b.emit_multi("stablehlo.custom_call", {x}, {result}, config)[0];
}

Args simple(Context& ctx, const Args& in, ReduceKind kind) {
  auto& b = ctx.b;
  const Dims& dims = ctx.attrs.get_ints("dims");
  Value x = in[0];
  if (ctx.attrs.get_bool("host_kernel", false)) {
    return {finish(ctx, host_extreme(b, x, dims, kind == ReduceKind::kMax), b.dims(in[0]), dims)};
  }
  if (b.dtype(x) == ElementType::kBool && (kind == ReduceKind::kSum || kind == ReduceKind::kProd)) {
    x = b.convert(x, ElementType::kI64);
  }
  Value r = reduce(b, x, dims, kind);
  if (kind == ReduceKind::kSum) r = sum_zero_sign(b, r);
  return {finish(ctx, r, b.dims(in[0]), dims)};
}

Args lower_mean(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& dims = ctx.attrs.get_ints("dims");
  Value s = sum_zero_sign(b, reduce(b, in[0], dims, ReduceKind::kSum));
  Value mean = b.div(s, b.full(b.type(s), static_cast<double>(count_of(b, in[0], dims))));
  return {finish(ctx, mean, b.dims(in[0]), dims)};
}

Args lower_all_any(Context& ctx, const Args& in, ReduceKind kind) {
  auto& b = ctx.b;
  const Dims& dims = ctx.attrs.get_ints("dims");
  Value x = cast(b, in[0], ElementType::kBool);
  return {finish(ctx, reduce(b, x, dims, kind), b.dims(in[0]), dims)};
}

// var / std (attrs correction, take_sqrt) and var_mean / std_mean (with_mean: second output).
Args lower_var(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& dims = ctx.attrs.get_ints("dims");
  Value x = in[0];
  const int64_t n = count_of(b, x, dims);
  Value sum = reduce(b, x, dims, ReduceKind::kSum);
  Value mean = b.div(sum, b.full(b.type(sum), static_cast<double>(n)));
  Value centered = b.sub(x, expand_reduced(b, mean, b.dims(x), dims));
  Value squares;
  if (is_complex(b.dtype(x))) {  // |z - mean|^2: the variance of complex values is real
    Value re = real_part(b, centered), im = imag_part(b, centered);
    squares = b.add(b.mul(re, re), b.mul(im, im));
  } else {
    squares = b.mul(centered, centered);
  }
  Value ss = reduce(b, squares, dims, ReduceKind::kSum);
  const double denom = std::max(0.0, static_cast<double>(n) - ctx.attrs.get_float("correction"));
  Value var = b.div(ss, b.full(b.type(ss), denom));
  if (ctx.attrs.get_bool("take_sqrt", false)) var = b.unary("stablehlo.sqrt", var);
  Args out{finish(ctx, var, b.dims(x), dims)};
  if (ctx.attrs.get_bool("with_mean", false)) {
    if (ctx.attrs.get_bool("keepdim", false)) mean = keep_dims(b, mean, b.dims(x), dims);
    out.push_back(ctx.attrs.has("mean_dtype") ? cast(b, mean, ctx.attrs.get_dtype("mean_dtype")) : mean);
  }
  return out;
}

// linalg.vector_norm: attrs ord, dims, keepdim.
Args lower_vector_norm(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& dims = ctx.attrs.get_ints("dims");
  const double ord = ctx.attrs.get_float("ord");
  Value a = magnitude(b, in[0]);
  Value r;
  if (ord == INFINITY) {
    r = reduce(b, a, dims, ReduceKind::kMax);
  } else if (ord == -INFINITY) {
    r = reduce(b, a, dims, ReduceKind::kMin);
  } else if (ord == 0) {
    r = reduce(b, cast(b, b.compare(a, b.full(b.type(a), 0), Compare::kNE), b.dtype(a)), dims, ReduceKind::kSum);
  } else if (ord == 1) {
    r = reduce(b, a, dims, ReduceKind::kSum);
  } else if (ord == 2) {
    r = b.unary("stablehlo.sqrt", reduce(b, b.mul(a, a), dims, ReduceKind::kSum));
  } else {
    Value p = b.full(b.type(a), ord);
    Value s = reduce(b, b.binary("stablehlo.power", a, p), dims, ReduceKind::kSum);
    r = b.binary("stablehlo.power", s, b.full(b.type(s), 1.0 / ord));
  }
  return {finish(ctx, r, b.dims(in[0]), dims)};
}

// Picks between (value, index) pairs: the larger (or smaller) value, NaN counting as the
// extreme; ties go to the smaller index (arg reductions) or the larger one (scans).
std::vector<Value> pick(Builder& b, Value av, Value ai, Value bv, Value bi, bool want_max, bool later_wins) {
  Value better = b.compare(av, bv, want_max ? Compare::kGT : Compare::kLT);
  Value same = b.compare(av, bv, Compare::kEQ);
  Value index_wins = b.compare(ai, bi, later_wins ? Compare::kGT : Compare::kLT);
  Value a_wins = b.binary("stablehlo.or", better, b.binary("stablehlo.and", same, index_wins));
  if (is_floating(b.dtype(av))) {
    Value a_nan = b.compare(av, av, Compare::kNE);
    Value b_nan = b.compare(bv, bv, Compare::kNE);
    Value not_b_nan = b.unary("stablehlo.not", b_nan);
    Value nan_case = b.binary("stablehlo.or", not_b_nan, index_wins);
    a_wins = b.select(a_nan, nan_case, b.binary("stablehlo.and", not_b_nan, a_wins));
  }
  return {b.select(a_wins, av, bv), b.select(a_wins, ai, bi)};
}

// Values and indices of the max/min along attrs.dim.
Args value_and_index(Context& ctx, Value x, int64_t dim, bool want_max) {
  auto& b = ctx.b;
  const ElementType t = b.dtype(x);
  Value idx = b.iota(TensorType{ElementType::kI64, b.dims(x)}, dim);
  Value vinit = init_for(b, t, want_max ? ReduceKind::kMax : ReduceKind::kMin);
  Value iinit = b.constant_int(ElementType::kI64, std::numeric_limits<int64_t>::max());
  auto out = b.reduce_multi({x, idx}, {vinit, iinit}, {dim}, [&](const std::vector<Value>& a) {
    return pick(b, a[0], a[1], a[2], a[3], want_max, false);
  });
  if (ctx.attrs.get_bool("keepdim", false)) {
    out[0] = keep_dims(b, out[0], b.dims(x), {dim});
    out[1] = keep_dims(b, out[1], b.dims(x), {dim});
  }
  return out;
}

Args lower_arg(Context& ctx, const Args& in, bool want_max) {
  auto& b = ctx.b;
  Value x = in[0];
  if (ctx.attrs.get_bool("flatten", false)) x = b.reshape(x, {b.type(x).numel()});
  if (b.type(x).rank() == 0) x = b.reshape(x, {1});
  return {value_and_index(ctx, x, ctx.attrs.get_int("dim", 0), want_max)[1]};
}

Args lower_cum(Context& ctx, const Args& in, ReduceKind kind) {
  auto& b = ctx.b;
  Value x = in[0];
  if (b.type(x).rank() == 0) return {x};
  if (b.dtype(x) == ElementType::kBool) x = b.convert(x, ElementType::kI64);
  Value r = inclusive_scan(b, x, ctx.attrs.get_int("dim"), kind);
  return {kind == ReduceKind::kSum ? sum_zero_sign(b, r) : r};
}

// cummax / cummin: (values, indices); on ties and after a NaN the later index wins.
Args lower_cum_extreme(Context& ctx, const Args& in, bool want_max) {
  auto& b = ctx.b;
  Value v = in[0];
  const Dims d = b.dims(v);
  if (d.empty()) return {v, b.constant_int(ElementType::kI64, 0)};
  const int64_t dim = ctx.attrs.get_int("dim");
  Value idx = b.iota(TensorType{ElementType::kI64, d}, dim);
  const int64_t n = d[dim];
  for (int64_t k = 1; k < n; k *= 2) {
    Dims start(d.size(), 0), limit = d, strides(d.size(), 1), low(d.size(), 0), high(d.size(), 0), interior(d.size(), 0);
    limit[dim] = n - k;
    low[dim] = k;
    Value sv = b.pad(b.slice(v, start, limit, strides), init_for(b, b.dtype(v), want_max ? ReduceKind::kMax : ReduceKind::kMin),
                     low, high, interior);
    Value si = b.pad(b.slice(idx, start, limit, strides), b.constant_int(ElementType::kI64, -1), low, high, interior);
    auto best = pick(b, v, idx, sv, si, want_max, true);
    v = best[0];
    idx = best[1];
  }
  return {v, idx};
}

Value max_keep(Builder& b, Value x, int64_t dim) {
  return expand_reduced(b, reduce(b, x, {dim}, ReduceKind::kMax), b.dims(x), {dim});
}

Value sum_keep(Builder& b, Value x, int64_t dim) {
  return expand_reduced(b, reduce(b, x, {dim}, ReduceKind::kSum), b.dims(x), {dim});
}

// softmax / log_softmax along attrs.dim (rank-0 inputs are treated as one element).
Args lower_softmax(Context& ctx, const Args& in, bool log) {
  auto& b = ctx.b;
  Value x = in[0];
  const Dims original = b.dims(x);
  if (original.empty()) x = b.reshape(x, {1});
  const int64_t dim = ctx.attrs.get_int("dim");
  Value m = max_keep(b, x, dim);
  // An all -inf row has max -inf; subtracting it would give nan, so use 0 there.
  m = b.select(b.compare(m, b.full(b.type(m), -INFINITY), Compare::kEQ), b.full(b.type(m), 0), m);
  Value shifted = b.sub(x, m);
  Value e = b.unary("stablehlo.exponential", shifted);
  Value s = sum_keep(b, e, dim);
  Value r = log ? b.sub(shifted, b.unary("stablehlo.log", s)) : b.div(e, s);
  return {b.reshape(r, original)};
}

// _softmax_backward_data(grad, output): output * (grad - sum(grad * output))
Args lower_softmax_backward(Context& ctx, const Args& in, bool log) {
  auto& b = ctx.b;
  Value g = in[0], y = in[1];
  const Dims original = b.dims(g);
  if (original.empty()) {
    g = b.reshape(g, {1});
    y = b.reshape(y, {1});
  }
  const int64_t dim = ctx.attrs.get_int("dim");
  Value r = log ? b.sub(g, b.mul(b.unary("stablehlo.exponential", y), sum_keep(b, g, dim)))
                : b.mul(y, b.sub(g, sum_keep(b, b.mul(g, y), dim)));
  return {b.reshape(r, original)};
}

Args lower_logsumexp(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& dims = ctx.attrs.get_ints("dims");
  Value x = in[0];
  Value m = reduce(b, real_part(b, x), dims, ReduceKind::kMax);  // complex values shift by their real parts' maximum
  m = b.select(b.compare(b.unary("stablehlo.abs", m), b.full(b.type(m), INFINITY), Compare::kEQ),
               b.full(b.type(m), 0), m);
  if (b.dtype(m) != b.dtype(x)) m = b.convert(m, b.dtype(x));
  Value mb = expand_reduced(b, m, b.dims(x), dims);
  Value s = reduce(b, b.unary("stablehlo.exponential", b.sub(x, mb)), dims, ReduceKind::kSum);
  return {finish(ctx, b.add(b.unary("stablehlo.log", s), m), b.dims(x), dims)};
}

const LoweringEntry kReductions[] = {
    {"sum", [](Context& c, const Args& a) { return simple(c, a, ReduceKind::kSum); }},
    {"prod", [](Context& c, const Args& a) { return simple(c, a, ReduceKind::kProd); }},
    {"amax", [](Context& c, const Args& a) { return simple(c, a, ReduceKind::kMax); }},
    {"amin", [](Context& c, const Args& a) { return simple(c, a, ReduceKind::kMin); }},
    {"mean", lower_mean},
    {"all", [](Context& c, const Args& a) { return lower_all_any(c, a, ReduceKind::kAnd); }},
    {"any", [](Context& c, const Args& a) { return lower_all_any(c, a, ReduceKind::kOr); }},
    {"var", lower_var},
    {"vector_norm", lower_vector_norm},
    {"logsumexp", lower_logsumexp},
    {"argmax", [](Context& c, const Args& a) { return lower_arg(c, a, true); }},
    {"argmin", [](Context& c, const Args& a) { return lower_arg(c, a, false); }},
    {"max_dim", [](Context& c, const Args& a) { return value_and_index(c, a[0], c.attrs.get_int("dim"), true); }},
    {"min_dim", [](Context& c, const Args& a) { return value_and_index(c, a[0], c.attrs.get_int("dim"), false); }},
    {"cumsum", [](Context& c, const Args& a) { return lower_cum(c, a, ReduceKind::kSum); }},
    {"cumprod", [](Context& c, const Args& a) { return lower_cum(c, a, ReduceKind::kProd); }},
    {"cummax", [](Context& c, const Args& a) { return lower_cum_extreme(c, a, true); }},
    {"cummin", [](Context& c, const Args& a) { return lower_cum_extreme(c, a, false); }},
    {"softmax", [](Context& c, const Args& a) { return lower_softmax(c, a, false); }},
    {"log_softmax", [](Context& c, const Args& a) { return lower_softmax(c, a, true); }},
    {"softmax_backward", [](Context& c, const Args& a) { return lower_softmax_backward(c, a, false); }},
    {"log_softmax_backward", [](Context& c, const Args& a) { return lower_softmax_backward(c, a, true); }},
};

TPU_REGISTER_LOWERINGS(kReductions);

}  // namespace
}  // namespace tpu::lowering
