// Indexing and data movement: advanced indexing (index / index_put), gather/scatter along a
// dim, index_select/add/copy/fill, take/put, masked_scatter, nonzero and masked_select (output
// size given by the caller), flip, roll, tril/triu, cat, constant padding.
#include <cmath>
#include <numeric>

#include "lowering/cast.h"
#include "lowering/hlo_names.h"
#include "lowering/registry.h"
#include "lowering/scan.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

Dims iota_dims(int64_t n, int64_t start = 0) {
  Dims d(n);
  std::iota(d.begin(), d.end(), start);
  return d;
}

// Negative indices count from the end of a dimension of size `size`.
Value wrap_index(Builder& b, Value idx, int64_t size) {
  idx = b.convert(idx, ElementType::kI64);
  Value zero = b.full(b.type(idx), 0);
  return b.select(b.compare(idx, zero, Compare::kLT), b.add(idx, b.full(b.type(idx), static_cast<double>(size))), idx);
}

// Coordinates for a point gather/scatter along `dim`: index at `dim`, the position elsewhere.
Value point_coords(Builder& b, Value index, int64_t dim, int64_t dim_size) {
  const Dims shape = b.dims(index);
  const TensorType it{ElementType::kI64, shape};
  std::vector<Value> parts;
  Dims one = shape;
  one.push_back(1);
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    Value c = d == dim ? wrap_index(b, index, dim_size) : b.iota(it, d);
    parts.push_back(b.reshape(c, one));
  }
  return b.concatenate(parts, static_cast<int64_t>(shape.size()));
}

std::string reduce_op(const std::string& reduce) {
  if (reduce == "add" || reduce == "sum" || reduce == "mean") return "stablehlo.add";
  if (reduce == "multiply" || reduce == "prod") return "stablehlo.multiply";
  if (reduce == "amax") return "stablehlo.maximum";
  if (reduce == "amin") return "stablehlo.minimum";
  return "";
}

double identity_of(const std::string& reduce, ElementType t) {
  if (reduce == "multiply" || reduce == "prod") return 1;
  if (reduce == "amax") return is_floating(t) ? -INFINITY : -9.2e18;
  if (reduce == "amin") return is_floating(t) ? INFINITY : 9.2e18;
  return 0;
}

// Scatters `updates` into `self` at `coords` (point scatter, index_vector_dim last) with
// PyTorch's reductions: none (replace), sum/add, prod/multiply, mean, amax, amin.
Value scatter_points(Builder& b, Value self, Value coords, Value updates, const std::string& reduce,
                     bool include_self) {
  const int64_t rank = b.type(self).rank();
  Builder::ScatterDims sd;
  sd.inserted_window_dims = iota_dims(rank);
  sd.scatter_dims_to_operand_dims = iota_dims(rank);
  sd.index_vector_dim = b.type(coords).rank() - 1;
  const std::string op = reduce_op(reduce);
  if (op.empty()) return b.scatter(self, coords, updates, sd, nullptr);
  Value base = self;
  if (!include_self) {
    base = b.scatter(self, coords, b.full(b.type(updates), identity_of(reduce, b.dtype(self))), sd, nullptr);
  }
  Value out = b.scatter(base, coords, updates, sd, op.c_str());
  if (reduce != "mean") return out;
  Value ones = b.full(b.type(updates), 1);
  Value counts = b.scatter(b.full(b.type(self), include_self ? 1 : 0), coords, ones, sd, "stablehlo.add");
  Value safe = b.max(counts, b.full(b.type(counts), 1));
  Value mean = is_floating(b.dtype(out)) ? b.div(out, safe) : b.div(out, safe);
  return b.select(b.compare(counts, b.full(b.type(counts), 0), Compare::kEQ), self, mean);
}

// Broadcasts the index tensors together and stacks them: [B..., k].
Value stacked_indices(Builder& b, const Args& idx, const Dims& indexed_dims, const Dims& self_dims, Dims* batch) {
  std::vector<Value> wrapped;
  for (size_t j = 0; j < idx.size(); ++j) wrapped.push_back(wrap_index(b, idx[j], self_dims[indexed_dims[j]]));
  wrapped = broadcast_all(b, wrapped);
  *batch = b.dims(wrapped[0]);
  Dims one = *batch;
  one.push_back(1);
  std::vector<Value> parts;
  for (Value w : wrapped) parts.push_back(b.reshape(w, one));
  return b.concatenate(parts, static_cast<int64_t>(batch->size()));
}

struct IndexPlan {
  Dims perm;      // self dims, indexed ones first
  Dims rest;      // non-indexed dims of self (original order)
  bool adjacent;  // PyTorch keeps the indexed block in place
};

IndexPlan index_plan(const Dims& self_dims, const Dims& indexed) {
  IndexPlan p;
  p.perm = indexed;
  for (int64_t d = 0; d < static_cast<int64_t>(self_dims.size()); ++d) {
    if (std::find(indexed.begin(), indexed.end(), d) == indexed.end()) {
      p.perm.push_back(d);
      p.rest.push_back(d);
    }
  }
  p.adjacent = true;
  for (size_t j = 1; j < indexed.size(); ++j) p.adjacent = p.adjacent && indexed[j] == indexed[j - 1] + 1;
  return p;
}

// Permutation from the gather layout [B..., rest...] to PyTorch's result layout.
Dims result_perm(const IndexPlan& p, size_t batch_rank, const Dims& indexed) {
  const size_t before = p.adjacent ? static_cast<size_t>(indexed.front()) : 0;
  Dims perm;
  for (size_t i = 0; i < before; ++i) perm.push_back(static_cast<int64_t>(batch_rank + i));
  for (size_t i = 0; i < batch_rank; ++i) perm.push_back(static_cast<int64_t>(i));
  for (size_t i = before; i < p.rest.size(); ++i) perm.push_back(static_cast<int64_t>(batch_rank + i));
  return perm;
}

Dims inverse(const Dims& perm) {
  Dims inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

// index: inputs [self, idx...]; attrs indexed_dims.
Args lower_index(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& indexed = ctx.attrs.get_ints("indexed_dims");
  const Dims self_dims = b.dims(in[0]);
  const IndexPlan p = index_plan(self_dims, indexed);
  Dims batch;
  Value coords = stacked_indices(b, Args(in.begin() + 1, in.end()), indexed, self_dims, &batch);
  Value x = b.transpose(in[0], p.perm);
  const size_t k = indexed.size();
  Builder::GatherDims g;
  g.offset_dims = iota_dims(static_cast<int64_t>(p.rest.size()), static_cast<int64_t>(batch.size()));
  g.collapsed_slice_dims = iota_dims(static_cast<int64_t>(k));
  g.start_index_map = iota_dims(static_cast<int64_t>(k));
  g.index_vector_dim = static_cast<int64_t>(batch.size());
  g.slice_sizes = Dims(k, 1);
  Dims result = batch;
  for (int64_t d : p.rest) {
    g.slice_sizes.push_back(self_dims[d]);
    result.push_back(self_dims[d]);
  }
  Value out = b.gather(x, coords, g, result);
  return {b.transpose(out, result_perm(p, batch.size(), indexed))};
}

// index_put: inputs [self, values, idx...]; attrs indexed_dims, accumulate.
Args lower_index_put(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& indexed = ctx.attrs.get_ints("indexed_dims");
  const Dims self_dims = b.dims(in[0]);
  const IndexPlan p = index_plan(self_dims, indexed);
  Dims batch;
  Value coords = stacked_indices(b, Args(in.begin() + 2, in.end()), indexed, self_dims, &batch);
  Value x = b.transpose(in[0], p.perm);
  const Dims to_result = result_perm(p, batch.size(), indexed);
  Dims gather_shape = batch;
  for (int64_t d : p.rest) gather_shape.push_back(self_dims[d]);
  Dims result_shape;
  for (int64_t d : to_result) result_shape.push_back(gather_shape[d]);
  Value values = b.transpose(b.broadcast_to(in[1], result_shape), inverse(to_result));
  const size_t k = indexed.size();
  Builder::ScatterDims sd;
  sd.update_window_dims = iota_dims(static_cast<int64_t>(p.rest.size()), static_cast<int64_t>(batch.size()));
  sd.inserted_window_dims = iota_dims(static_cast<int64_t>(k));
  sd.scatter_dims_to_operand_dims = iota_dims(static_cast<int64_t>(k));
  sd.index_vector_dim = static_cast<int64_t>(batch.size());
  Value out = b.scatter(x, coords, values, sd, ctx.attrs.get_bool("accumulate", false) ? "stablehlo.add" : nullptr);
  return {b.transpose(out, inverse(p.perm))};
}

// gather(self, dim, index): out[i..] = self[.. index[i..] at dim ..]
Args lower_gather(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const int64_t dim = ctx.attrs.get_int("dim");
  Value self = in[0];
  if (b.type(in[1]).numel() == 0) return {b.full(TensorType{b.dtype(self), b.dims(in[1])}, 0)};
  if (b.type(self).rank() == 0) return {b.broadcast_to(self, b.dims(in[1]))};
  Value coords = point_coords(b, in[1], dim, b.dims(self)[dim]);
  const int64_t rank = b.type(self).rank();
  Builder::GatherDims g;
  g.collapsed_slice_dims = iota_dims(rank);
  g.start_index_map = iota_dims(rank);
  g.index_vector_dim = b.type(in[1]).rank();
  g.slice_sizes = Dims(rank, 1);
  return {b.gather(self, coords, g, b.dims(in[1]))};
}

// scatter(self, dim, index, src): attrs dim, reduce, include_self. src may be a scalar.
Args lower_scatter(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value self = in[0], index = in[1], src = in[2];
  if (b.type(index).numel() == 0) return {self};
  int64_t dim = ctx.attrs.get_int("dim");
  if (b.type(self).rank() == 0) {  // a 0-dim tensor scatters like a 1-element vector
    self = b.reshape(self, {1});
    index = b.reshape(index, {1});
    dim = 0;
  }
  const Dims index_dims = b.dims(index);
  if (b.type(src).rank() == 0) {
    src = b.broadcast_to(src, index_dims);
  } else {
    src = b.reshape(src, b.type(src).rank() == 0 ? Dims{1} : b.dims(src));
    if (b.dims(src) != index_dims) src = b.slice(src, Dims(index_dims.size(), 0), index_dims, Dims(index_dims.size(), 1));
  }
  Value coords = point_coords(b, index, dim, b.dims(self)[dim]);
  Value out = scatter_points(b, self, coords, src, ctx.attrs.get_string("reduce"), ctx.attrs.get_bool("include_self", true));
  return {b.reshape(out, b.dims(in[0]))};
}

// Along-dim ops with a 1-D index: gather/scatter of whole slices.
Value index_as_column(Builder& b, Value index, int64_t size) {
  Value idx = wrap_index(b, index, size);
  return b.reshape(idx, {b.type(idx).numel(), 1});
}

// index_select(self, dim, index)
Args lower_index_select(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value self = in[0];
  const bool scalar_self = b.type(self).rank() == 0;
  if (scalar_self) self = b.reshape(self, {1});
  const int64_t dim = scalar_self ? 0 : ctx.attrs.get_int("dim");
  const Dims sd = b.dims(self);
  Value idx = index_as_column(b, in[1], sd[dim]);
  const int64_t n = b.dims(idx)[0];
  Builder::GatherDims g;
  for (int64_t d = 0; d < static_cast<int64_t>(sd.size()); ++d) {
    if (d != dim) g.offset_dims.push_back(d);
  }
  g.collapsed_slice_dims = {dim};
  g.start_index_map = {dim};
  g.index_vector_dim = 1;
  g.slice_sizes = sd;
  g.slice_sizes[dim] = 1;
  Dims result = sd;
  result[dim] = n;
  Value out = b.gather(self, idx, g, result);
  if (scalar_self) out = b.reshape(out, {});  // a 0-dim tensor stays 0-dim
  return {out};
}

// index_add / index_copy / index_reduce(self, dim, index, source[, alpha]): attrs dim, reduce
// ("add", "copy", "prod", "mean", "amax", "amin"), include_self.
Args lower_index_update(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value self = in[0], source = in[2];
  const bool scalar_self = b.type(self).rank() == 0;
  if (scalar_self) {
    self = b.reshape(self, {1});
    source = b.reshape(source, {b.type(source).numel()});
  }
  const int64_t dim = scalar_self ? 0 : ctx.attrs.get_int("dim");
  const Dims sd = b.dims(self);
  Value idx = index_as_column(b, in[1], sd[dim]);
  if (in.size() > 3) source = b.mul(source, b.broadcast_to(in[3], b.dims(source)));
  const std::string reduce = ctx.attrs.get_string("reduce");
  Builder::ScatterDims s;
  for (int64_t d = 0; d < static_cast<int64_t>(sd.size()); ++d) {
    if (d != dim) s.update_window_dims.push_back(d);
  }
  s.inserted_window_dims = {dim};
  s.scatter_dims_to_operand_dims = {dim};
  s.index_vector_dim = 1;
  Value out;
  if (reduce == "copy") {
    out = b.scatter(self, idx, source, s, nullptr);
  } else {
    const bool include_self = ctx.attrs.get_bool("include_self", true);
    Value base = self;
    if (!include_self) {
      base = b.scatter(self, idx, b.full(b.type(source), identity_of(reduce, b.dtype(self))), s, nullptr);
    }
    out = b.scatter(base, idx, source, s, reduce_op(reduce).c_str());
    if (reduce == "mean") {
      Value counts = b.scatter(b.full(b.type(self), include_self ? 1 : 0), idx, b.full(b.type(source), 1), s,
                               "stablehlo.add");
      Value safe = b.max(counts, b.full(b.type(counts), 1));
      out = b.select(b.compare(counts, b.full(b.type(counts), 0), Compare::kEQ), self, b.div(out, safe));
    }
  }
  return {b.reshape(out, b.dims(in[0]))};
}

// index_fill(self, dim, index, value)
Args lower_index_fill(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value self = in[0];
  const bool scalar_self = b.type(self).rank() == 0;
  if (scalar_self) self = b.reshape(self, {1});
  const int64_t dim = scalar_self ? 0 : ctx.attrs.get_int("dim");
  Dims sd = b.dims(self);
  Value idx = index_as_column(b, in[1], sd[dim]);
  Dims upd = sd;
  upd[dim] = b.dims(idx)[0];
  Builder::ScatterDims s;
  for (int64_t d = 0; d < static_cast<int64_t>(sd.size()); ++d) {
    if (d != dim) s.update_window_dims.push_back(d);
  }
  s.inserted_window_dims = {dim};
  s.scatter_dims_to_operand_dims = {dim};
  s.index_vector_dim = 1;
  Value out = b.scatter(self, idx, b.broadcast_in_dim(b.convert(in[2], b.dtype(self)), upd, {}), s, nullptr);
  return {b.reshape(out, b.dims(in[0]))};
}

// take(self, index): flat gather
Args lower_take(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  if (b.type(in[1]).numel() == 0 || b.type(in[0]).numel() == 0) {
    return {b.full(TensorType{b.dtype(in[0]), b.dims(in[1])}, 0)};
  }
  Value flat = b.reshape(in[0], {b.type(in[0]).numel()});
  return {b.gather_flat(flat, wrap_index(b, in[1], b.type(in[0]).numel()))};
}

// put(self, index, source): flat scatter; attrs accumulate
Args lower_put(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const int64_t n = b.type(in[0]).numel();
  Value flat = b.reshape(in[0], {n});
  Value idx = b.reshape(wrap_index(b, in[1], n), {b.type(in[1]).numel(), 1});
  Value src = b.reshape(in[2], {b.type(in[2]).numel()});
  Builder::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  Value out = b.scatter(flat, idx, src, s, ctx.attrs.get_bool("accumulate", false) ? "stablehlo.add" : nullptr);
  return {b.reshape(out, b.dims(in[0]))};
}

// Positions of the true elements of a flat bool vector, in order, as [count] i64 (count static).
// Slots past the number of true elements hold `unused`; true elements past `count` are dropped.
Value true_positions(Builder& b, Value mask_flat, int64_t count, int64_t unused = 0) {
  const int64_t n = b.type(mask_flat).numel();
  Value m = b.convert(mask_flat, ElementType::kI64);
  Value slot = b.sub(inclusive_scan(b, m, 0, hlo::ReduceKind::kSum), b.full(b.type(m), 1));
  // Elements that are false go to slot `count`, which is out of range and dropped.
  Value dest = b.select(b.compare(m, b.full(b.type(m), 0), Compare::kNE), slot, b.full(b.type(m), static_cast<double>(count)));
  Builder::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  return b.scatter(b.full(TensorType{ElementType::kI64, {count}}, static_cast<double>(unused)), b.reshape(dest, {n, 1}),
                   b.iota(TensorType{ElementType::kI64, {n}}, 0), s, nullptr);
}

// nonzero(self): attrs count -> [count, rank]. With attr fill (nonzero_static) count is the
// requested size: extra true elements are dropped and missing rows hold `fill`.
Args lower_nonzero(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const int64_t count = ctx.attrs.get_int("count");
  const Dims d = b.dims(in[0]);
  Value nz = b.compare(in[0], b.full(b.type(in[0]), 0), Compare::kNE);
  const bool is_static = ctx.attrs.has("fill");
  Value lin = true_positions(b, b.reshape(nz, {b.type(in[0]).numel()}), count, is_static ? -1 : 0);
  std::vector<Value> cols;
  int64_t stride = 1;
  std::vector<int64_t> strides(d.size());
  for (int64_t i = static_cast<int64_t>(d.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= d[i];
  }
  for (size_t i = 0; i < d.size(); ++i) {
    Value c = b.binary("stablehlo.remainder", b.div(lin, b.full(b.type(lin), static_cast<double>(strides[i]))),
                       b.full(b.type(lin), static_cast<double>(d[i])));
    if (is_static) {
      c = b.select(b.compare(lin, b.full(b.type(lin), 0), Compare::kLT),
                   b.full(b.type(lin), static_cast<double>(ctx.attrs.get_int("fill"))), c);
    }
    cols.push_back(b.reshape(c, {count, 1}));
  }
  if (cols.empty()) return {b.full(TensorType{ElementType::kI64, {count, 0}}, 0)};
  return {b.concatenate(cols, 1)};
}

// masked_select(self, mask): inputs already broadcast by the caller; attrs count.
Args lower_masked_select(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1]});
  const int64_t n = b.type(v[0]).numel();
  Value lin = true_positions(b, b.reshape(cast(b, v[1], ElementType::kBool), {n}), ctx.attrs.get_int("count"));
  return {b.gather_flat(b.reshape(v[0], {n}), lin)};
}

// masked_scatter(self, mask, source): true positions take source elements in order.
Args lower_masked_scatter(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value self = in[0];
  const int64_t n = b.type(self).numel();
  Value m = b.reshape(b.broadcast_to(cast(b, in[1], ElementType::kBool), b.dims(self)), {n});
  Value mi = b.convert(m, ElementType::kI64);
  Value pos = b.sub(inclusive_scan(b, mi, 0, hlo::ReduceKind::kSum), b.full(b.type(mi), 1));
  const int64_t sn = b.type(in[2]).numel();
  Value src = b.reshape(in[2], {sn});
  pos = b.clamp(b.constant(ElementType::kI64, 0), pos, b.constant(ElementType::kI64, static_cast<double>(std::max<int64_t>(sn - 1, 0))));
  Value taken = sn == 0 ? b.full(TensorType{b.dtype(self), {n}}, 0) : b.gather_flat(src, pos);
  return {b.reshape(b.select(m, taken, b.reshape(self, {n})), b.dims(self))};
}

Args lower_flip(Context& ctx, const Args& in) { return {ctx.b.reverse(in[0], ctx.attrs.get_ints("dims"))}; }

// roll(self, shifts, dims); with no dims the flattened tensor rolls.
Args lower_roll(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& shifts = ctx.attrs.get_ints("shifts");
  const Dims& dims = ctx.attrs.get_ints("dims");
  Value x = in[0];
  const Dims original = b.dims(x);
  Dims use_dims = dims;
  if (dims.empty()) {
    x = b.reshape(x, {b.type(x).numel()});
    use_dims = {0};
  }
  for (size_t i = 0; i < use_dims.size(); ++i) {
    const Dims d = b.dims(x);
    const int64_t dim = use_dims[i];
    const int64_t n = d[dim];
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    Dims start(d.size(), 0), limit = d, strides(d.size(), 1);
    start[dim] = n - s;
    Value tail = b.slice(x, start, limit, strides);
    start[dim] = 0;
    limit[dim] = n - s;
    Value head = b.slice(x, start, limit, strides);
    x = b.concatenate({tail, head}, dim);
  }
  return {b.reshape(x, original)};
}

// tril / triu over the last two dims: attrs diagonal, upper.
Args lower_triangle(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  const Dims d = b.dims(x);
  const int64_t r = static_cast<int64_t>(d.size());
  const TensorType it{ElementType::kI64, d};
  // col <= row + k (tril) or col >= row + k (triu). (Written without `col - row`: XLA's CPU
  // backend folds `(col - row) <= -1` wrongly when both dims have size 1.)
  Value shifted = b.add(b.iota(it, r - 2), b.full(it, static_cast<double>(ctx.attrs.get_int("diagonal"))));
  Value keep = b.compare(b.iota(it, r - 1), shifted, ctx.attrs.get_bool("upper") ? Compare::kGE : Compare::kLE);
  return {b.select(keep, x, b.full(b.type(x), 0))};
}

Args lower_cat(Context& ctx, const Args& in) { return {ctx.b.concatenate(in, ctx.attrs.get_int("dim"))}; }

// constant padding: inputs [x, value]; attrs low, high (per dim, may be negative).
Args lower_pad_constant(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& low = ctx.attrs.get_ints("low");
  const Dims& high = ctx.attrs.get_ints("high");
  return {b.pad(in[0], b.convert(in[1], b.dtype(in[0])), low, high, Dims(low.size(), 0))};
}

const LoweringEntry kIndexing[] = {
    {"index", lower_index},
    {"index_put", lower_index_put},
    {"gather", lower_gather},
    {"scatter", lower_scatter},
    {"index_select", lower_index_select},
    {"index_update", lower_index_update},
    {"index_fill", lower_index_fill},
    {"take", lower_take},
    {"put", lower_put},
    {"nonzero", lower_nonzero},
    {"masked_select", lower_masked_select},
    {"masked_scatter", lower_masked_scatter},
    {"flip", lower_flip},
    {"roll", lower_roll},
    {"triangle", lower_triangle},
    {"cat", lower_cat},
    {"pad_constant", lower_pad_constant},
};

TPU_REGISTER_LOWERINGS(kIndexing);

}  // namespace
}  // namespace tpu::lowering
