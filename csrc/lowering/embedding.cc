// Embedding gradients and EmbeddingBag (sum / mean / max bags given by offsets), with
// padding_idx, per-sample weights and scale_grad_by_freq as in ATen.
#include <cmath>

#include "lowering/hlo_names.h"
#include "lowering/registry.h"
#include "lowering/scan.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

Builder::ScatterDims row_scatter() {
  Builder::ScatterDims s;
  s.update_window_dims = {1};
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  return s;
}

Builder::ScatterDims point_scatter() {
  Builder::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  return s;
}

Value column(Builder& b, Value v) { return b.reshape(v, {b.type(v).numel(), 1}); }

// Rows `idx` ([M]) of `table` ([R, D]).
Value gather_rows(Builder& b, Value table, Value idx) {
  const Dims td = b.dims(table);
  Builder::GatherDims g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  g.slice_sizes = {1, td[1]};
  return b.gather(table, column(b, idx), g, {b.type(idx).numel(), td[1]});
}

// Elements `idx` of a vector.
Value gather_elems(Builder& b, Value vec, Value idx) { return b.gather_flat(vec, idx); }

// Counts of each value of idx ([M]) in [0, n).
Value counts_of(Builder& b, Value idx, int64_t n, ElementType t) {
  return b.scatter(b.full(TensorType{t, {n}}, 0), column(b, idx), b.full(TensorType{t, {b.type(idx).numel()}}, 1),
                   point_scatter(), "stablehlo.add");
}

// embedding_backward: inputs [grad, indices]; attrs num_weights, padding_idx, scale_grad_by_freq
Args lower_embedding_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const int64_t n = ctx.attrs.get_int("num_weights");
  const int64_t pad = ctx.attrs.get_int("padding_idx");
  const Dims gd = b.dims(in[0]);
  const int64_t d = gd.back();
  const int64_t m = b.type(in[1]).numel();
  Value g = b.reshape(in[0], {m, d});
  Value idx = b.reshape(b.convert(in[1], ElementType::kI64), {m});
  if (ctx.attrs.get_bool("scale_grad_by_freq")) {
    Value counts = counts_of(b, idx, n, b.dtype(g));
    g = b.div(g, b.broadcast_in_dim(gather_elems(b, counts, idx), {m, d}, {0}));
  }
  // Rows of the padding index get no gradient: send them out of range (dropped).
  Value dest = b.select(b.compare(idx, b.full(b.type(idx), static_cast<double>(pad)), Compare::kEQ),
                        b.full(b.type(idx), static_cast<double>(n)), idx);
  return {b.scatter(b.full(TensorType{b.dtype(g), {n, d}}, 0), column(b, dest), g, row_scatter(), "stablehlo.add")};
}

// Bag of every index from the offsets: counts of bag starts up to each position.
Value bag_of(Builder& b, Value offsets, int64_t n, int64_t bags) {
  Value starts = b.slice(offsets, {1}, {bags}, {1});  // the first bag starts at 0
  Value marks = b.scatter(b.full(TensorType{ElementType::kI64, {n}}, 0), column(b, starts),
                          b.full(TensorType{ElementType::kI64, {bags - 1}}, 1), point_scatter(), "stablehlo.add");
  return inclusive_scan(b, marks, 0, hlo::ReduceKind::kSum);
}

// embedding_bag: inputs [weight, indices, offsets, (per_sample_weights)]; attrs mode (0 sum,
// 1 mean, 2 max), bags, padding_idx (-1: none), has_psw.
// Outputs: output [B, D], offset2bag [N], bag_size [B], max_indices ([B, D] for max, else [B]).
Args lower_embedding_bag(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const int64_t mode = ctx.attrs.get_int("mode");
  const int64_t bags = ctx.attrs.get_int("bags");
  const int64_t pad = ctx.attrs.get_int("padding_idx");
  Value weight = in[0];
  const int64_t d = b.dims(weight)[1];
  Value idx = b.convert(in[1], ElementType::kI64);
  const int64_t n = b.type(idx).numel();
  Value bag = n > 0 && bags > 1 ? bag_of(b, b.convert(in[2], ElementType::kI64), n, bags)
                                : b.full(TensorType{ElementType::kI64, {n}}, 0);
  Value valid = pad >= 0 ? b.compare(idx, b.full(b.type(idx), static_cast<double>(pad)), Compare::kNE)
                         : b.full(TensorType{ElementType::kBool, {n}}, 1);
  Value rows = gather_rows(b, weight, idx);
  if (ctx.attrs.get_bool("has_psw")) rows = b.mul(rows, b.broadcast_in_dim(in[3], {n, d}, {0}));
  Value valid_rows = b.broadcast_in_dim(valid, {n, d}, {0});
  // Invalid (padding) entries go to an out-of-range bag and are dropped.
  Value dest = b.select(valid, bag, b.full(b.type(bag), static_cast<double>(bags)));
  Value size = b.scatter(b.full(TensorType{ElementType::kI64, {bags}}, 0), column(b, dest),
                         b.full(TensorType{ElementType::kI64, {n}}, 1), point_scatter(), "stablehlo.add");
  const ElementType t = b.dtype(weight);
  Value out, max_idx;
  if (mode == 2) {
    Value init = b.full(TensorType{t, {bags, d}}, -INFINITY);
    out = b.scatter(init, column(b, dest), rows, row_scatter(), "stablehlo.maximum");
    // The weight row that produced each maximum.
    Value is_max = b.binary("stablehlo.and", valid_rows,
                            b.compare(rows, gather_rows(b, out, b.min(bag, b.full(b.type(bag), static_cast<double>(bags - 1)))),
                                      Compare::kEQ));
    Value cand = b.select(is_max, b.broadcast_in_dim(idx, {n, d}, {0}), b.full(TensorType{ElementType::kI64, {n, d}}, -1));
    max_idx = b.scatter(b.full(TensorType{ElementType::kI64, {bags, d}}, -1), column(b, dest), cand, row_scatter(),
                        "stablehlo.maximum");
    Value empty = b.broadcast_in_dim(b.compare(size, b.full(b.type(size), 0), Compare::kEQ), {bags, d}, {0});
    out = b.select(empty, b.full(b.type(out), 0), out);
    max_idx = b.select(empty, b.full(b.type(max_idx), 0), max_idx);
  } else {
    out = b.scatter(b.full(TensorType{t, {bags, d}}, 0), column(b, dest), rows, row_scatter(), "stablehlo.add");
    if (mode == 1) {
      Value denom = b.convert(b.max(size, b.full(b.type(size), 1)), t);
      out = b.div(out, b.broadcast_in_dim(denom, {bags, d}, {0}));
    }
    max_idx = b.full(TensorType{ElementType::kI64, {bags}}, 0);
  }
  return {out, bag, size, max_idx};
}

// embedding_bag_backward: inputs [grad, indices, offset2bag, bag_size, max_indices,
// (per_sample_weights)]; attrs num_weights, mode, padding_idx, has_psw, scale_grad_by_freq.
Args lower_embedding_bag_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const int64_t n_weights = ctx.attrs.get_int("num_weights");
  const int64_t mode = ctx.attrs.get_int("mode");
  const int64_t pad = ctx.attrs.get_int("padding_idx");
  Value grad = in[0];
  const int64_t d = b.dims(grad)[1];
  const ElementType t = b.dtype(grad);
  Value idx = b.convert(in[1], ElementType::kI64);
  const int64_t n = b.type(idx).numel();
  if (mode == 2) {
    const int64_t bags = b.dims(grad)[0];
    Value mi = b.convert(in[4], ElementType::kI64);
    Value col = b.iota(TensorType{ElementType::kI64, {bags, d}}, 1);
    Value coords = b.concatenate({b.reshape(mi, {bags, d, 1}), b.reshape(col, {bags, d, 1})}, 2);
    Builder::ScatterDims s;
    s.inserted_window_dims = {0, 1};
    s.scatter_dims_to_operand_dims = {0, 1};
    s.index_vector_dim = 2;
    // Empty bags have max index 0 but zero gradient contribution only if grad is 0 there;
    // ATen skips them: mark them out of range.
    Value size = b.convert(in[3], ElementType::kI64);
    Value empty = b.broadcast_in_dim(b.compare(size, b.full(b.type(size), 0), Compare::kEQ), {bags, d}, {0});
    Value g = b.select(empty, b.full(b.type(grad), 0), grad);
    return {b.scatter(b.full(TensorType{t, {n_weights, d}}, 0), coords, g, s, "stablehlo.add")};
  }
  Value bag = b.convert(in[2], ElementType::kI64);
  Value rows = gather_rows(b, grad, bag);
  if (mode == 1) {
    Value size = b.convert(b.max(b.convert(in[3], ElementType::kI64), b.full(TensorType{ElementType::kI64, b.dims(in[3])}, 1)), t);
    rows = b.div(rows, b.broadcast_in_dim(gather_elems(b, size, bag), {n, d}, {0}));
  }
  if (ctx.attrs.get_bool("has_psw")) rows = b.mul(rows, b.broadcast_in_dim(in[5], {n, d}, {0}));
  if (ctx.attrs.get_bool("scale_grad_by_freq")) {
    Value counts = counts_of(b, idx, n_weights, t);
    rows = b.div(rows, b.broadcast_in_dim(gather_elems(b, counts, idx), {n, d}, {0}));
  }
  Value dest = pad >= 0 ? b.select(b.compare(idx, b.full(b.type(idx), static_cast<double>(pad)), Compare::kEQ),
                                   b.full(b.type(idx), static_cast<double>(n_weights)), idx)
                        : idx;
  return {b.scatter(b.full(TensorType{t, {n_weights, d}}, 0), column(b, dest), rows, row_scatter(), "stablehlo.add")};
}

// per-sample-weights gradient: inputs [grad, weight, indices, offset2bag]; attrs padding_idx
Args lower_embedding_bag_psw_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const int64_t pad = ctx.attrs.get_int("padding_idx");
  Value idx = b.convert(in[2], ElementType::kI64);
  Value g_rows = gather_rows(b, in[0], b.convert(in[3], ElementType::kI64));
  Value w_rows = gather_rows(b, in[1], idx);
  Value r = b.reduce(b.mul(g_rows, w_rows), b.constant(b.dtype(g_rows), 0), {1}, hlo::ReduceKind::kSum);
  if (pad >= 0) {
    r = b.select(b.compare(idx, b.full(b.type(idx), static_cast<double>(pad)), Compare::kEQ), b.full(b.type(r), 0), r);
  }
  return {r};
}

// embedding_renorm: inputs [weight, indices]; attrs max_norm, norm_type. Rows referenced by
// indices whose norm exceeds max_norm are scaled to max_norm (ATen's 1e-7 guard included).
Args lower_embedding_renorm(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value w = in[0];
  const Dims wd = b.dims(w);
  const double p = ctx.attrs.get_float("norm_type"), max_norm = ctx.attrs.get_float("max_norm");
  Value a = b.unary("stablehlo.abs", w);
  Value norm;
  if (p == 1) {
    norm = b.reduce(a, b.constant(b.dtype(a), 0), {1}, hlo::ReduceKind::kSum);
  } else if (p == 2) {
    norm = b.unary("stablehlo.sqrt", b.reduce(b.mul(a, a), b.constant(b.dtype(a), 0), {1}, hlo::ReduceKind::kSum));
  } else {
    Value s = b.reduce(b.binary("stablehlo.power", a, b.full(b.type(a), p)), b.constant(b.dtype(a), 0), {1},
                       hlo::ReduceKind::kSum);
    norm = b.binary("stablehlo.power", s, b.full(b.type(s), 1.0 / p));
  }
  Value idx = b.reshape(b.convert(in[1], ElementType::kI64), {b.type(in[1]).numel()});
  Value used = b.compare(counts_of(b, idx, wd[0], ElementType::kI64), b.full(TensorType{ElementType::kI64, {wd[0]}}, 0),
                         Compare::kGT);
  Value too_big = b.binary("stablehlo.and", used, b.compare(norm, b.full(b.type(norm), max_norm), Compare::kGT));
  Value scale = b.select(too_big, b.div(b.full(b.type(norm), max_norm), b.add(norm, b.full(b.type(norm), 1e-7))),
                         b.full(b.type(norm), 1));
  return {b.mul(w, b.broadcast_in_dim(scale, wd, {0}))};
}

const LoweringEntry kEmbedding[] = {
    {"embedding_renorm", lower_embedding_renorm},
    {"embedding_backward", lower_embedding_backward},
    {"embedding_bag", lower_embedding_bag},
    {"embedding_bag_backward", lower_embedding_bag_backward},
    {"embedding_bag_psw_backward", lower_embedding_bag_psw_backward},
};

TPU_REGISTER_LOWERINGS(kEmbedding);

}  // namespace
}  // namespace tpu::lowering
