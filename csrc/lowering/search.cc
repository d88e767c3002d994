// Searching and counting: searchsorted/bucketize, isin, bincount/histc, and distance and
// geometry helpers (cdist, cross, max_unpool, logcumsumexp).
#include <cmath>

#include "lowering/hlo_names.h"
#include "lowering/pointwise.h"
#include "lowering/registry.h"
#include "lowering/scan.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

Dims identity(int64_t n) {
  Dims d(n);
  for (int64_t i = 0; i < n; ++i) d[i] = i;
  return d;
}

// searchsorted(sorted_sequence, values): attrs right, out_int32. 1-D sequences apply to every
// value; N-D sequences pair with the values' leading dims.
Args lower_searchsorted(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value seq = in[0], v = in[1];
  const Dims sd = b.dims(seq), vd = b.dims(v);
  const int64_t vr = static_cast<int64_t>(vd.size());
  Dims cmp = vd;
  cmp.push_back(sd.back());
  Dims seq_map;
  if (sd.size() == 1) {
    seq_map = {vr};
  } else {
    seq_map = identity(vr - 1);
    seq_map.push_back(vr);
  }
  Value s = b.broadcast_in_dim(seq, cmp, seq_map);
  Value x = b.broadcast_in_dim(v, cmp, identity(vr));
  Value before = b.compare(s, x, ctx.attrs.get_bool("right") ? Compare::kLE : Compare::kLT);
  Value count = b.reduce(b.convert(before, ElementType::kI64), b.constant(ElementType::kI64, 0), {vr}, ReduceKind::kSum);
  return {b.convert(count, ctx.attrs.get_bool("out_int32") ? ElementType::kI32 : ElementType::kI64)};
}

// isin(elements, test_elements): attrs invert
Args lower_isin(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value e = in[0];
  Value t = b.reshape(in[1], {b.type(in[1]).numel()});
  const Dims ed = b.dims(e);
  Dims cmp = ed;
  cmp.push_back(b.type(t).numel());
  Value eq = b.compare(b.broadcast_in_dim(e, cmp, identity(static_cast<int64_t>(ed.size()))),
                       b.broadcast_in_dim(t, cmp, {static_cast<int64_t>(ed.size())}), Compare::kEQ);
  Value any = b.reduce(eq, b.constant(ElementType::kBool, 0), {static_cast<int64_t>(ed.size())}, ReduceKind::kOr);
  return {ctx.attrs.get_bool("invert") ? b.unary("stablehlo.not", any) : any};
}

// bincount(x, (weights)): attrs size
Args lower_bincount(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const int64_t size = ctx.attrs.get_int("size");
  const int64_t n = b.type(in[0]).numel();
  Value idx = b.reshape(b.convert(in[0], ElementType::kI64), {n, 1});
  Value w = in.size() > 1 ? b.reshape(in[1], {n}) : b.full(TensorType{ElementType::kI64, {n}}, 1);
  Builder::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  return {b.scatter(b.full(TensorType{b.dtype(w), {size}}, 0), idx, w, s, "stablehlo.add")};
}

// histc(x): attrs bins, min, max (already resolved)
Args lower_histc(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const int64_t bins = ctx.attrs.get_int("bins");
  const double lo = ctx.attrs.get_float("min"), hi = ctx.attrs.get_float("max");
  const int64_t n = b.type(in[0]).numel();
  Value x = b.reshape(in[0], {n});
  const TensorType t = b.type(x);
  Value idx;
  if (is_floating(t.dtype)) {
    Value scaled = b.div(b.mul(b.sub(x, b.full(t, lo)), b.full(t, static_cast<double>(bins))), b.full(t, hi - lo));
    idx = b.convert(b.unary("stablehlo.floor", scaled), ElementType::kI64);
  } else {
    // Integer input (as CUDA allows): the bin is (x - min) * bins / (max - min) in integer arithmetic.
    Value x64 = b.convert(x, ElementType::kI64);
    const TensorType t64 = b.type(x64);
    idx = b.div(b.mul(b.sub(x64, b.full(t64, lo)), b.full(t64, static_cast<double>(bins))), b.full(t64, hi - lo));
  }
  idx = b.select(b.compare(x, b.full(t, hi), Compare::kEQ), b.full(b.type(idx), static_cast<double>(bins - 1)), idx);
  Value inside = b.binary("stablehlo.and", b.compare(x, b.full(t, lo), Compare::kGE), b.compare(x, b.full(t, hi), Compare::kLE));
  idx = b.select(inside, idx, b.full(b.type(idx), static_cast<double>(bins)));  // out of range: dropped
  Builder::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  return {b.scatter(b.full(TensorType{b.dtype(x), {bins}}, 0), b.reshape(idx, {n, 1}), b.full(t, 1), s, "stablehlo.add")};
}

// cdist(x1 [.., P, M], x2 [.., R, M]): attrs p
Args lower_cdist(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const double p = ctx.attrs.get_float("p");
  const Dims d1 = b.dims(in[0]), d2 = b.dims(in[1]);
  const int64_t r = static_cast<int64_t>(d1.size());
  Dims out(d1.begin(), d1.end() - 1);
  out.push_back(d2[r - 2]);
  out.push_back(d1[r - 1]);
  Dims m1 = identity(r - 1), m2 = identity(r - 2);
  m1.push_back(r);
  m2.push_back(r - 1);
  m2.push_back(r);
  Value a = b.broadcast_in_dim(in[0], out, m1);
  Value c = b.broadcast_in_dim(in[1], out, m2);
  Value diff = b.unary("stablehlo.abs", b.sub(a, c));
  Value res;
  if (p == 0) {
    res = b.reduce(b.convert(b.compare(diff, b.full(b.type(diff), 0), Compare::kNE), b.dtype(diff)),
                   b.constant(b.dtype(diff), 0), {r}, ReduceKind::kSum);
  } else if (p == 1) {
    res = b.reduce(diff, b.constant(b.dtype(diff), 0), {r}, ReduceKind::kSum);
  } else if (p == 2) {
    res = b.unary("stablehlo.sqrt", b.reduce(b.mul(diff, diff), b.constant(b.dtype(diff), 0), {r}, ReduceKind::kSum));
  } else if (std::isinf(p)) {
    res = b.reduce(diff, b.constant(b.dtype(diff), 0), {r}, ReduceKind::kMax);
  } else {
    Value s = b.reduce(b.binary("stablehlo.power", diff, b.full(b.type(diff), p)), b.constant(b.dtype(diff), 0), {r},
                       ReduceKind::kSum);
    res = b.binary("stablehlo.power", s, b.full(b.type(s), 1.0 / p));
  }
  return {res};
}

// cross(a, b) along attrs dim (size 3)
Args lower_cross(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1]});
  const int64_t dim = ctx.attrs.get_int("dim");
  const Dims d = b.dims(v[0]);
  auto comp = [&](Value x, int64_t i) {
    Dims start(d.size(), 0), limit = d, strides(d.size(), 1);
    start[dim] = i;
    limit[dim] = i + 1;
    return b.slice(x, start, limit, strides);
  };
  Value c0 = b.sub(b.mul(comp(v[0], 1), comp(v[1], 2)), b.mul(comp(v[0], 2), comp(v[1], 1)));
  Value c1 = b.sub(b.mul(comp(v[0], 2), comp(v[1], 0)), b.mul(comp(v[0], 0), comp(v[1], 2)));
  Value c2 = b.sub(b.mul(comp(v[0], 0), comp(v[1], 1)), b.mul(comp(v[0], 1), comp(v[1], 0)));
  return {b.concatenate({c0, c1, c2}, dim)};
}

// max_unpool(x, indices): attrs output (spatial sizes); scatters each plane's values to the
// flat positions in `indices`.
Args lower_max_unpool(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& out_spatial = ctx.attrs.get_ints("output");
  const Dims xd = b.dims(in[0]);
  const size_t lead = xd.size() - out_spatial.size();
  int64_t rows = 1, plane_in = 1, plane_out = 1;
  for (size_t i = 0; i < lead; ++i) rows *= xd[i];
  for (size_t i = lead; i < xd.size(); ++i) plane_in *= xd[i];
  for (int64_t s : out_spatial) plane_out *= s;
  Value v = b.reshape(in[0], {rows, plane_in});
  Value idx = b.reshape(b.convert(in[1], ElementType::kI64), {rows, plane_in});
  const TensorType it{ElementType::kI64, {rows, plane_in}};
  Value coords = b.concatenate({b.reshape(b.iota(it, 0), {rows, plane_in, 1}), b.reshape(idx, {rows, plane_in, 1})}, 2);
  Builder::ScatterDims s;
  s.inserted_window_dims = {0, 1};
  s.scatter_dims_to_operand_dims = {0, 1};
  s.index_vector_dim = 2;
  Value out = b.scatter(b.full(TensorType{b.dtype(v), {rows, plane_out}}, 0), coords, v, s, nullptr);
  Dims shape(xd.begin(), xd.begin() + static_cast<int64_t>(lead));
  shape.insert(shape.end(), out_spatial.begin(), out_spatial.end());
  return {b.reshape(out, shape)};
}

// Complex logcumsumexp in ATen's order: the running value absorbs one element at a time, so the
// imaginary part carries the same multiple of 2 pi as on the CPU (a tree of combines may pick
// another branch of the logarithm). A while loop over the scanned dim, moved to the front.
Value complex_logcumsumexp(Builder& b, Value x, int64_t dim) {
  const Dims xd = b.dims(x);
  Dims perm{dim};
  for (int64_t d = 0; d < static_cast<int64_t>(xd.size()); ++d) if (d != dim) perm.push_back(d);
  Dims inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  Value front = b.transpose(x, perm);
  const Dims front_dims = b.dims(front);
  const Dims row_dims(front_dims.begin() + 1, front_dims.end());
  const ElementType i64 = ElementType::kI64;
  auto out = b.while_loop(
      {b.constant_int(i64, 0), b.full(TensorType{b.dtype(x), row_dims}, -INFINITY), front},
      [&](const Args& s) { return Args{b.compare(s[0], b.constant_int(i64, xd[dim]), Compare::kLT)}; },
      [&](const Args& s) {
        Value running = log_add_exp(b, index_dim0(b, s[2], s[0]), s[1]);
        return Args{b.add(s[0], b.constant_int(i64, 1)), running, update_dim0(b, s[2], running, s[0])};
      });
  return b.transpose(out[2], inverse);
}

// logcumsumexp along attrs dim
Args lower_logcumsumexp(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  if (b.type(x).rank() == 0) return {x};
  const int64_t dim = ctx.attrs.get_int("dim");
  if (is_complex(b.dtype(x))) return {complex_logcumsumexp(b, x, dim)};
  return {inclusive_scan(b, x, dim, b.constant(b.dtype(x), -INFINITY),
                         [&](Value earlier, Value later) { return log_add_exp(b, later, earlier); })};
}

const LoweringEntry kSearch[] = {
    {"searchsorted", lower_searchsorted}, {"isin", lower_isin},   {"bincount", lower_bincount},
    {"histc", lower_histc},               {"cdist", lower_cdist}, {"cross", lower_cross},
    {"max_unpool", lower_max_unpool},     {"logcumsumexp", lower_logcumsumexp},
};

TPU_REGISTER_LOWERINGS(kSearch);

}  // namespace
}  // namespace tpu::lowering
