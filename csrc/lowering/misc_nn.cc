// Less common NN ops: adaptive max pooling, reflect/replicate/circular padding, GLU, PReLU,
// im2col/col2im (as one-hot convolutions), renorm, mode, frexp, pdist, multi-margin losses.
#include <cmath>
#include <limits>

#include "lowering/convolution.h"
#include "lowering/hlo_names.h"
#include "lowering/pointwise.h"
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

Dims iota_dims(int64_t n, int64_t start = 0) {
  Dims d(n);
  for (int64_t i = 0; i < n; ++i) d[i] = start + i;
  return d;
}

Value sigmoid(Builder& b, Value x) { return b.unary("stablehlo.logistic", x); }

// x taken at constant positions `idx` along `dim`.
Value take_along(Builder& b, Value x, int64_t dim, const std::vector<int64_t>& idx) {
  const Dims xd = b.dims(x);
  Value indices = b.constant_ints(ElementType::kI64, {static_cast<int64_t>(idx.size()), 1}, idx);
  Builder::GatherDims g;
  for (int64_t d = 0; d < static_cast<int64_t>(xd.size()); ++d) if (d != dim) g.offset_dims.push_back(d);
  g.collapsed_slice_dims = {dim};
  g.start_index_map = {dim};
  g.index_vector_dim = 1;
  g.slice_sizes = xd;
  g.slice_sizes[dim] = 1;
  Dims out = xd;
  out[dim] = static_cast<int64_t>(idx.size());
  return b.gather(x, indices, g, out);
}

// Sum of y's slices into positions `idx` along `dim` of a zero tensor of size `n` there.
Value add_along(Builder& b, Value y, int64_t dim, const std::vector<int64_t>& idx, int64_t n) {
  Dims out = b.dims(y);
  out[dim] = n;
  Value indices = b.constant_ints(ElementType::kI64, {static_cast<int64_t>(idx.size()), 1}, idx);
  Builder::ScatterDims s;
  for (int64_t d = 0; d < static_cast<int64_t>(out.size()); ++d) if (d != dim) s.update_window_dims.push_back(d);
  s.inserted_window_dims = {dim};
  s.scatter_dims_to_operand_dims = {dim};
  s.index_vector_dim = 1;
  return b.scatter(b.full(TensorType{b.dtype(y), out}, 0), indices, y, s, "stablehlo.add");
}

// Source positions of a padded dimension of size n padded by (lo, hi).
std::vector<int64_t> pad_positions(const std::string& mode, int64_t n, int64_t lo, int64_t hi) {
  std::vector<int64_t> idx;
  for (int64_t i = -lo; i < n + hi; ++i) {
    int64_t j = i;
    if (mode == "reflect") {
      if (j < 0) j = -j;
      if (j >= n) j = 2 * (n - 1) - j;
    } else if (mode == "replicate") {
      j = std::min(std::max<int64_t>(j, 0), n - 1);
    } else {  // circular
      j = ((j % n) + n) % n;
    }
    idx.push_back(j);
  }
  return idx;
}

// pad_index: inputs [x]; attrs mode, pads (PyTorch order: last dim first, (lo, hi) pairs)
Args lower_pad_index(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& pads = ctx.attrs.get_ints("pads");
  const std::string& mode = ctx.attrs.get_string("mode");
  Value x = in[0];
  const int64_t rank = b.type(x).rank();
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    const int64_t dim = rank - 1 - static_cast<int64_t>(i);
    x = take_along(b, x, dim, pad_positions(mode, b.dims(x)[dim], pads[2 * i], pads[2 * i + 1]));
  }
  return {x};
}

// pad_index_backward: inputs [grad]; attrs mode, pads, input_size
Args lower_pad_index_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& pads = ctx.attrs.get_ints("pads");
  const Dims& input = ctx.attrs.get_ints("input_size");
  const std::string& mode = ctx.attrs.get_string("mode");
  Value g = in[0];
  const int64_t rank = b.type(g).rank();
  for (int64_t i = static_cast<int64_t>(pads.size() / 2) - 1; i >= 0; --i) {
    const int64_t dim = rank - 1 - i;
    g = add_along(b, g, dim, pad_positions(mode, input[dim], pads[2 * i], pads[2 * i + 1]), input[dim]);
  }
  return {g};
}

std::pair<Value, Value> halves(Builder& b, Value x, int64_t dim) {
  const Dims d = b.dims(x);
  Dims start(d.size(), 0), mid = d, strides(d.size(), 1);
  mid[dim] = d[dim] / 2;
  Value first = b.slice(x, start, mid, strides);
  start[dim] = d[dim] / 2;
  return {first, b.slice(x, start, d, strides)};
}

Args lower_glu(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  auto [a, g] = halves(b, in[0], ctx.attrs.get_int("dim"));
  return {b.mul(a, sigmoid(b, g))};
}

// glu_backward: inputs [grad, x]
Args lower_glu_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const int64_t dim = ctx.attrs.get_int("dim");
  auto [a, g] = halves(b, in[1], dim);
  Value s = sigmoid(b, g);
  Value da = b.mul(in[0], s);
  Value dg = b.mul(b.mul(b.mul(in[0], a), s), b.sub(b.full(b.type(s), 1), s));
  return {b.concatenate({da, dg}, dim)};
}

// PReLU's weight broadcasts against x like any operand (PyTorch's prelu reshapes it to
// [C, 1, ...] first); its gradient sums over the broadcast dimensions.
Value sum_to(Builder& b, Value v, const Dims& shape) {
  const Dims vd = b.dims(v);
  const int64_t lead = static_cast<int64_t>(vd.size() - shape.size());
  Dims dims;
  for (int64_t d = 0; d < static_cast<int64_t>(vd.size()); ++d) {
    if (d < lead || (shape[d - lead] == 1 && vd[d] != 1)) dims.push_back(d);
  }
  return b.reshape(b.reduce(v, b.constant(b.dtype(v), 0), dims, ReduceKind::kSum), shape);
}

Args lower_prelu(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1]});
  return {b.select(b.compare(v[0], b.full(b.type(v[0]), 0), Compare::kGT), v[0], b.mul(v[1], v[0]))};
}

// prelu_backward: inputs [grad, x, w] -> (grad_input, grad_weight)
Args lower_prelu_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1], in[2]});
  Value g = v[0], x = v[1], w = v[2];
  Value pos = b.compare(x, b.full(b.type(x), 0), Compare::kGT);
  Value gi = b.select(pos, g, b.mul(w, g));
  Value contrib = b.select(pos, b.full(b.type(x), 0), b.mul(g, x));
  return {sum_to(b, gi, b.dims(in[1])), sum_to(b, contrib, b.dims(in[2]))};
}

// One-hot kernel [C*kh*kw, 1, kh, kw] picking tap (i, j) into channel c*kh*kw + i*kw + j.
Value patch_kernel(Builder& b, ElementType t, int64_t c, const Dims& k) {
  const int64_t taps = k[0] * k[1];
  const Dims shape{c * taps, 1, k[0], k[1]};
  const TensorType it{ElementType::kI64, shape};
  Value tap = b.binary("stablehlo.remainder", b.iota(it, 0), b.full(it, static_cast<double>(taps)));
  Value here = b.add(b.mul(b.iota(it, 2), b.full(it, static_cast<double>(k[1]))), b.iota(it, 3));
  return b.convert(b.compare(tap, here, Compare::kEQ), t);
}

ConvParams patch_params(const Attrs& a, int64_t c) {
  ConvParams p;
  p.stride = a.get_ints("stride");
  p.padding = a.get_ints("padding");
  p.dilation = a.get_ints("dilation");
  p.output_padding = {0, 0};
  p.groups = c;
  return p;
}

// im2col: inputs [x [N, C, H, W]]; attrs kernel, dilation, padding, stride -> [N, C*kh*kw, L]
Args lower_im2col(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims xd = b.dims(in[0]);
  const Dims& k = ctx.attrs.get_ints("kernel");
  Value y = conv_forward(b, in[0], patch_kernel(b, b.dtype(in[0]), xd[1], k), patch_params(ctx.attrs, xd[1]));
  const Dims yd = b.dims(y);
  return {b.reshape(y, {yd[0], yd[1], yd[2] * yd[3]})};
}

// col2im: inputs [cols [N, C*kh*kw, L]]; attrs output_size, kernel, dilation, padding, stride
Args lower_col2im(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims cd = b.dims(in[0]);
  const Dims& k = ctx.attrs.get_ints("kernel");
  const Dims& out = ctx.attrs.get_ints("output_size");
  const Dims& s = ctx.attrs.get_ints("stride");
  const Dims& p = ctx.attrs.get_ints("padding");
  const Dims& d = ctx.attrs.get_ints("dilation");
  const int64_t c = cd[1] / (k[0] * k[1]);
  Dims blocks;
  for (int i = 0; i < 2; ++i) blocks.push_back((out[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) / s[i] + 1);
  Value g = b.reshape(in[0], {cd[0], cd[1], blocks[0], blocks[1]});
  return {conv_input_grad(b, g, patch_kernel(b, b.dtype(g), c, k), patch_params(ctx.attrs, c), out)};
}

// renorm: attrs p, dim, maxnorm (complex x: norms of |x|)
Args lower_renorm(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  const Dims xd = b.dims(x);
  const int64_t dim = ctx.attrs.get_int("dim");
  const double p = ctx.attrs.get_float("p"), maxnorm = ctx.attrs.get_float("maxnorm");
  Dims dims;
  for (int64_t d = 0; d < static_cast<int64_t>(xd.size()); ++d) if (d != dim) dims.push_back(d);
  Value a = magnitude(b, x);
  Value norm;
  if (std::isinf(p)) {
    norm = b.reduce(a, b.constant(b.dtype(a), 0), dims, ReduceKind::kMax);
  } else {
    Value s = b.reduce(b.binary("stablehlo.power", a, b.full(b.type(a), p)), b.constant(b.dtype(a), 0), dims, ReduceKind::kSum);
    norm = b.binary("stablehlo.power", s, b.full(b.type(s), 1.0 / p));
  }
  Value factor = b.select(b.compare(norm, b.full(b.type(norm), maxnorm), Compare::kGT),
                          b.div(b.full(b.type(norm), maxnorm), b.add(norm, b.full(b.type(norm), 1e-7))),
                          b.full(b.type(norm), 1));
  factor = b.convert(factor, b.dtype(x));  // complex x: a real factor (norms of |x|)
  return {b.mul(x, b.broadcast_in_dim(factor, xd, {dim}))};
}

// mode along attrs dim: the most frequent value (ties: the smallest), with the index of its
// last occurrence -> (values, indices) without the dim.
Args lower_mode(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  const int64_t dim = ctx.attrs.get_int("dim");
  const Dims xd = b.dims(x);
  const int64_t r = static_cast<int64_t>(xd.size());
  Dims pair = xd;
  pair.push_back(xd[dim]);  // [.., n(i), .., n(j)]
  Dims map_i = iota_dims(r);
  Dims map_j = iota_dims(r);
  map_j[dim] = r;
  Value xi = b.broadcast_in_dim(x, pair, map_i);
  Value xj = b.broadcast_in_dim(x, pair, map_j);
  Value same = b.compare(xi, xj, Compare::kEQ);
  if (is_floating(b.dtype(x))) {
    same = b.binary("stablehlo.or", same, b.binary("stablehlo.and", b.compare(xi, xi, Compare::kNE), b.compare(xj, xj, Compare::kNE)));
  }
  Value count = b.reduce(b.convert(same, ElementType::kI64), b.constant_int(ElementType::kI64, 0), {r}, ReduceKind::kSum);
  const TensorType it{ElementType::kI64, pair};
  Value last = b.reduce(b.select(same, b.iota(it, r), b.full(it, -1)), b.constant_int(ElementType::kI64, -1), {r},
                        ReduceKind::kMax);
  // Among the elements of the winning value the one at `last` wins (the later position), so
  // the value returned is the very element the index names (-0.0 and +0.0 compare equal).
  Value pos = b.iota(TensorType{ElementType::kI64, xd}, dim);
  const Value i64_init = b.constant_int(ElementType::kI64, -1);
  auto best = b.reduce_multi(
      {count, x, last, pos}, {i64_init, b.constant(b.dtype(x), 0), b.constant_int(ElementType::kI64, 0), i64_init},
      {dim}, [&](const std::vector<Value>& a) {
        // a: acc (count, value, last, pos), elem (count, value, last, pos)
        Value more = b.compare(a[4], a[0], Compare::kGT);
        Value tie = b.compare(a[4], a[0], Compare::kEQ);
        Value smaller = b.compare(a[5], a[1], Compare::kLT);
        Value equal = b.binary("stablehlo.and", b.compare(a[5], a[1], Compare::kEQ), b.compare(a[7], a[3], Compare::kGT));
        Value take = b.binary("stablehlo.or", more,
                              b.binary("stablehlo.and", tie, b.binary("stablehlo.or", smaller, equal)));
        return std::vector<Value>{b.select(take, a[4], a[0]), b.select(take, a[5], a[1]), b.select(take, a[6], a[2]),
                                  b.select(take, a[7], a[3])};
      });
  return {best[1], best[2]};
}

// frexp: (mantissa in [0.5, 1), int32 exponent) with x = m * 2^e
Args lower_frexp(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  const TensorType t = b.type(x);
  Value wide = b.convert(x, ElementType::kF64);
  Value ax = b.unary("stablehlo.abs", wide);
  Value e = b.add(b.unary("stablehlo.floor", b.div(b.unary("stablehlo.log", ax), b.full(b.type(ax), M_LN2))),
                  b.full(b.type(ax), 1));
  Value m = b.div(wide, b.binary("stablehlo.power", b.full(b.type(ax), 2), e));
  // log2 rounding can be off by one at powers of two: renormalise into [0.5, 1).
  Value am = b.unary("stablehlo.abs", m);
  Value too_big = b.compare(am, b.full(b.type(am), 1), Compare::kGE);
  m = b.select(too_big, b.div(m, b.full(b.type(m), 2)), m);
  e = b.select(too_big, b.add(e, b.full(b.type(e), 1)), e);
  Value too_small = b.compare(b.unary("stablehlo.abs", m), b.full(b.type(m), 0.5), Compare::kLT);
  m = b.select(too_small, b.mul(m, b.full(b.type(m), 2)), m);
  e = b.select(too_small, b.sub(e, b.full(b.type(e), 1)), e);
  Value special = b.binary("stablehlo.or", b.compare(ax, b.full(b.type(ax), 0), Compare::kEQ),
                           b.unary("stablehlo.not", b.emit("stablehlo.is_finite", {wide}, TensorType{ElementType::kBool, t.dims})));
  m = b.select(special, wide, m);
  e = b.select(special, b.full(b.type(e), 0), e);
  return {b.convert(m, t.dtype), b.convert(e, ElementType::kI32)};
}

// pdist: inputs [x [N, M]]; attrs p -> distances of rows i < j
Args lower_pdist(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  const Dims xd = b.dims(x);
  const int64_t n = xd[0];
  const double p = ctx.attrs.get_float("p");
  Dims out{n, n, xd[1]};
  Value diff = b.unary("stablehlo.abs", b.sub(b.broadcast_in_dim(x, out, {0, 2}), b.broadcast_in_dim(x, out, {1, 2})));
  Value d;
  if (p == 0) {
    d = b.reduce(b.convert(b.compare(diff, b.full(b.type(diff), 0), Compare::kNE), b.dtype(diff)), b.constant(b.dtype(diff), 0), {2}, ReduceKind::kSum);
  } else if (std::isinf(p)) {
    d = b.reduce(diff, b.constant(b.dtype(diff), 0), {2}, ReduceKind::kMax);
  } else if (p == 2) {
    d = b.unary("stablehlo.sqrt", b.reduce(b.mul(diff, diff), b.constant(b.dtype(diff), 0), {2}, ReduceKind::kSum));
  } else if (p == 1) {
    d = b.reduce(diff, b.constant(b.dtype(diff), 0), {2}, ReduceKind::kSum);
  } else {
    Value s = b.reduce(b.binary("stablehlo.power", diff, b.full(b.type(diff), p)), b.constant(b.dtype(diff), 0), {2}, ReduceKind::kSum);
    d = b.binary("stablehlo.power", s, b.full(b.type(s), 1.0 / p));
  }
  std::vector<int64_t> pairs;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) pairs.push_back(i * n + j);
  if (pairs.empty()) return {b.full(TensorType{b.dtype(x), {0}}, 0)};
  Value flat = b.reshape(d, {n * n});
  return {b.gather_flat(flat, b.constant_ints(ElementType::kI64, {static_cast<int64_t>(pairs.size())}, pairs))};
}

Value reduce_rows(Builder& b, Value loss, int64_t reduction) {
  if (reduction == 0) return loss;
  Value s = b.reduce(loss, b.constant(b.dtype(loss), 0), iota_dims(b.type(loss).rank()), ReduceKind::kSum);
  if (reduction == 1) s = b.div(s, b.full(b.type(s), static_cast<double>(std::max<int64_t>(b.type(loss).numel(), 1))));
  return s;
}

// multi_margin_loss: inputs [x [N, C] or [C], target, (weight)]; attrs p, margin, reduction, has_weight
struct Margins {
  Value z, active, onehot, wy;  // [N, C] (z: margin - x_y + x_j), and per-row class weight
  int64_t classes;
};

Margins margins(Context& ctx, const Args& in, Value x, Value target) {
  auto& b = ctx.b;
  const Dims xd = b.dims(x);
  Margins m;
  m.classes = xd[1];
  Value t = b.convert(target, ElementType::kI64);
  const TensorType it{ElementType::kI64, xd};
  m.onehot = b.compare(b.iota(it, 1), b.broadcast_in_dim(t, xd, {0}), Compare::kEQ);
  Value xy = b.reduce(b.select(m.onehot, x, b.full(b.type(x), 0)), b.constant(b.dtype(x), 0), {1}, ReduceKind::kSum);
  m.z = b.add(b.sub(b.full(b.type(x), ctx.attrs.get_float("margin")), b.broadcast_in_dim(xy, xd, {0})), x);
  m.active = b.binary("stablehlo.and", b.compare(m.z, b.full(b.type(x), 0), Compare::kGT), b.unary("stablehlo.not", m.onehot));
  if (ctx.attrs.get_bool("has_weight")) {
    Value w = b.broadcast_in_dim(in[2], xd, {1});
    m.wy = b.reduce(b.select(m.onehot, w, b.full(b.type(w), 0)), b.constant(b.dtype(w), 0), {1}, ReduceKind::kSum);
  } else {
    m.wy = b.full(TensorType{b.dtype(x), {xd[0]}}, 1);
  }
  return m;
}

Args lower_multi_margin(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const bool vec = b.type(in[0]).rank() == 1;
  Value x = vec ? b.reshape(in[0], {1, b.dims(in[0])[0]}) : in[0];
  Value t = b.reshape(in[1], {b.dims(x)[0]});
  Margins m = margins(ctx, in, x, t);
  const bool square = ctx.attrs.get_int("p") == 2;
  Value term = b.select(m.active, square ? b.mul(m.z, m.z) : m.z, b.full(b.type(m.z), 0));
  Value per = b.reduce(term, b.constant(b.dtype(term), 0), {1}, ReduceKind::kSum);
  per = b.div(b.mul(per, m.wy), b.full(b.type(per), static_cast<double>(m.classes)));
  const int64_t reduction = ctx.attrs.get_int("reduction");
  if (vec && reduction == 0) return {b.reshape(per, {})};
  return {reduce_rows(b, per, reduction)};
}

// multi_margin_loss_backward: inputs [grad, x, target, (weight)]
Args lower_multi_margin_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const bool vec = b.type(in[1]).rank() == 1;
  Value x = vec ? b.reshape(in[1], {1, b.dims(in[1])[0]}) : in[1];
  const Dims xd = b.dims(x);
  Value t = b.reshape(in[2], {xd[0]});
  Args shifted{in[1], in[2]};
  if (in.size() > 3) shifted.push_back(in[3]);
  Margins m = margins(ctx, shifted, x, t);
  const bool square = ctx.attrs.get_int("p") == 2;
  Value dz = b.select(m.active, square ? b.mul(b.full(b.type(m.z), 2), m.z) : b.full(b.type(m.z), 1), b.full(b.type(m.z), 0));
  dz = b.mul(dz, b.broadcast_in_dim(b.div(m.wy, b.full(b.type(m.wy), static_cast<double>(m.classes))), xd, {0}));
  Value row_sum = b.reduce(dz, b.constant(b.dtype(dz), 0), {1}, ReduceKind::kSum);
  Value gx = b.select(m.onehot, b.neg(b.broadcast_in_dim(row_sum, xd, {0})), dz);
  const int64_t reduction = ctx.attrs.get_int("reduction");
  Value g = in[0];
  if (reduction == 0) {
    g = b.broadcast_in_dim(b.reshape(g, {xd[0]}), xd, {0});
  } else {
    g = b.broadcast_in_dim(b.reshape(g, {}), xd, {});
    if (reduction == 1) g = b.div(g, b.full(b.type(g), static_cast<double>(xd[0])));
  }
  return {b.reshape(b.mul(gx, g), b.dims(in[1]))};
}

// multilabel_margin_loss: inputs [x [N, C] or [C], target (class ids, -1 terminated)]
// -> (loss, is_target)
struct Multilabel {
  Value is_target;  // [N, C] f
  Value valid;      // [N, J] bool
  Value xt;         // [N, J] x at target j
};

Multilabel multilabel(Builder& b, Value x, Value target) {
  const Dims xd = b.dims(x);
  const int64_t n = xd[0], c = xd[1];
  Value t = b.convert(target, ElementType::kI64);
  // valid_j: no -1 at or before j
  Value neg = b.convert(b.compare(t, b.full(b.type(t), -1), Compare::kEQ), ElementType::kI64);
  Value seen = b.reduce_window(neg, b.constant_int(ElementType::kI64, 0), {1, c}, {1, 1}, {1, 1}, {{0, 0}, {c - 1, 0}},
                               ReduceKind::kSum);
  Multilabel m;
  m.valid = b.compare(seen, b.full(b.type(seen), 0), Compare::kEQ);
  const Dims ncc{n, c, c};
  Value tj = b.broadcast_in_dim(t, ncc, {0, 1});  // [n, j, class]
  Value cls = b.iota(TensorType{ElementType::kI64, ncc}, 2);
  Value hit = b.binary("stablehlo.and", b.compare(tj, cls, Compare::kEQ), b.broadcast_in_dim(m.valid, ncc, {0, 1}));
  m.is_target = b.convert(b.reduce(hit, b.constant(ElementType::kBool, 0), {1}, ReduceKind::kOr), b.dtype(x));
  Value xb = b.broadcast_in_dim(x, ncc, {0, 2});
  m.xt = b.reduce(b.select(hit, xb, b.full(b.type(xb), 0)), b.constant(b.dtype(x), 0), {2}, ReduceKind::kSum);
  return m;
}

Args lower_multilabel_margin(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const bool vec = b.type(in[0]).rank() == 1;
  Value x = vec ? b.reshape(in[0], {1, b.dims(in[0])[0]}) : in[0];
  const Dims xd = b.dims(x);
  Value t = b.reshape(in[1], xd);
  Multilabel m = multilabel(b, x, t);
  const Dims njk{xd[0], xd[1], xd[1]};
  Value h = b.add(b.sub(b.full(TensorType{b.dtype(x), njk}, 1), b.broadcast_in_dim(m.xt, njk, {0, 1})),
                  b.broadcast_in_dim(x, njk, {0, 2}));
  Value use = b.binary("stablehlo.and", b.broadcast_in_dim(m.valid, njk, {0, 1}),
                       b.compare(b.broadcast_in_dim(m.is_target, njk, {0, 2}), b.full(TensorType{b.dtype(x), njk}, 0), Compare::kEQ));
  Value term = b.select(b.binary("stablehlo.and", use, b.compare(h, b.full(b.type(h), 0), Compare::kGT)), h, b.full(b.type(h), 0));
  Value per = b.div(b.reduce(term, b.constant(b.dtype(x), 0), {1, 2}, ReduceKind::kSum), b.full(TensorType{b.dtype(x), {xd[0]}}, static_cast<double>(xd[1])));
  const int64_t reduction = ctx.attrs.get_int("reduction");
  Value loss = (vec && reduction == 0) ? b.reshape(per, {}) : reduce_rows(b, per, reduction);
  return {loss, b.reshape(m.is_target, b.dims(in[0]))};
}

// multilabel_margin_loss_backward: inputs [grad, x, target, is_target]
Args lower_multilabel_margin_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const bool vec = b.type(in[1]).rank() == 1;
  Value x = vec ? b.reshape(in[1], {1, b.dims(in[1])[0]}) : in[1];
  const Dims xd = b.dims(x);
  const int64_t n = xd[0], c = xd[1];
  Value t = b.reshape(in[2], xd);
  Multilabel m = multilabel(b, x, t);
  const Dims njk{n, c, c};
  Value h = b.add(b.sub(b.full(TensorType{b.dtype(x), njk}, 1), b.broadcast_in_dim(m.xt, njk, {0, 1})),
                  b.broadcast_in_dim(x, njk, {0, 2}));
  Value use = b.binary("stablehlo.and", b.broadcast_in_dim(m.valid, njk, {0, 1}),
                       b.compare(b.broadcast_in_dim(m.is_target, njk, {0, 2}), b.full(TensorType{b.dtype(x), njk}, 0), Compare::kEQ));
  Value act = b.convert(b.binary("stablehlo.and", use, b.compare(h, b.full(b.type(h), 0), Compare::kGT)), b.dtype(x));
  // d/dx_k += act[j, k]; d/dx_{t_j} -= sum_k act[j, k]
  Value dk = b.reduce(act, b.constant(b.dtype(x), 0), {1}, ReduceKind::kSum);  // [n, k]
  Value per_j = b.reduce(act, b.constant(b.dtype(x), 0), {2}, ReduceKind::kSum);  // [n, j]
  Value tj = b.broadcast_in_dim(b.convert(t, ElementType::kI64), njk, {0, 1});
  Value cls = b.iota(TensorType{ElementType::kI64, njk}, 2);
  Value hit = b.binary("stablehlo.and", b.compare(tj, cls, Compare::kEQ), b.broadcast_in_dim(m.valid, njk, {0, 1}));
  Value dt = b.reduce(b.select(hit, b.broadcast_in_dim(per_j, njk, {0, 1}), b.full(TensorType{b.dtype(x), njk}, 0)),
                      b.constant(b.dtype(x), 0), {1}, ReduceKind::kSum);
  Value gx = b.div(b.sub(dk, dt), b.full(TensorType{b.dtype(x), xd}, static_cast<double>(c)));
  const int64_t reduction = ctx.attrs.get_int("reduction");
  Value g = in[0];
  if (reduction == 0) {
    g = b.broadcast_in_dim(b.reshape(g, {n}), xd, {0});
  } else {
    g = b.broadcast_in_dim(b.reshape(g, {}), xd, {});
    if (reduction == 1) g = b.div(g, b.full(b.type(g), static_cast<double>(n)));
  }
  return {b.reshape(b.mul(gx, g), b.dims(in[1]))};
}

// adaptive_max_pool: inputs [x]; attrs output_size -> (values, flat in-plane indices)
Args lower_adaptive_max_pool(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  const Dims xd = b.dims(x);
  const Dims& out = ctx.attrs.get_ints("output_size");
  const int64_t n = static_cast<int64_t>(out.size());
  const int64_t lead = static_cast<int64_t>(xd.size()) - n;
  Dims big(xd.begin(), xd.begin() + lead);
  big.insert(big.end(), out.begin(), out.end());
  for (int64_t i = 0; i < n; ++i) big.push_back(xd[lead + i]);
  // window membership per spatial dim, combined
  Value inside = b.full(TensorType{ElementType::kBool, big}, 1);
  Value flat = b.full(TensorType{ElementType::kI64, big}, 0);
  int64_t stride = 1;
  for (int64_t i = n - 1; i >= 0; --i) {
    const int64_t od = lead + i, sd = lead + n + i;
    const TensorType it{ElementType::kI64, big};
    Value o = b.iota(it, od), s = b.iota(it, sd);
    Value start = b.div(b.mul(o, b.full(it, static_cast<double>(xd[lead + i]))), b.full(it, static_cast<double>(out[i])));
    Value end = b.div(b.add(b.mul(b.add(o, b.full(it, 1)), b.full(it, static_cast<double>(xd[lead + i]))), b.full(it, static_cast<double>(out[i] - 1))),
                      b.full(it, static_cast<double>(out[i])));
    inside = b.binary("stablehlo.and", inside,
                      b.binary("stablehlo.and", b.compare(s, start, Compare::kGE), b.compare(s, end, Compare::kLT)));
    flat = b.add(flat, b.mul(s, b.full(it, static_cast<double>(stride))));
    stride *= xd[lead + i];
  }
  Dims map = iota_dims(lead);
  for (int64_t i = 0; i < n; ++i) map.push_back(lead + n + i);
  const ElementType t = b.dtype(x);
  Value xb = b.broadcast_in_dim(x, big, map);
  Value lowest = is_floating(t) ? b.full(TensorType{t, big}, -INFINITY) : b.full(TensorType{t, big}, std::numeric_limits<int32_t>::min());
  Value masked = b.select(inside, xb, lowest);
  Dims spatial = iota_dims(n, lead + n);
  auto r = b.reduce_multi({masked, b.select(inside, flat, b.full(b.type(flat), -1))},
                          {is_floating(t) ? b.constant(t, -INFINITY) : b.constant(t, std::numeric_limits<int32_t>::min()),
                           b.constant_int(ElementType::kI64, std::numeric_limits<int64_t>::max())},
                          spatial, [&](const std::vector<Value>& a) {
                            Value better = b.compare(a[2], a[0], Compare::kGT);
                            if (is_floating(t)) better = b.binary("stablehlo.or", better, b.binary("stablehlo.and", b.compare(a[2], a[2], Compare::kNE), b.compare(a[0], a[0], Compare::kEQ)));
                            Value tie = b.binary("stablehlo.and", b.compare(a[2], a[0], Compare::kEQ), b.compare(a[3], a[1], Compare::kLT));
                            Value take = b.binary("stablehlo.or", better, tie);
                            return std::vector<Value>{b.select(take, a[2], a[0]), b.select(take, a[3], a[1])};
                          });
  return {r[0], r[1]};
}

const LoweringEntry kMisc[] = {
    {"pad_index", lower_pad_index},
    {"pad_index_backward", lower_pad_index_backward},
    {"glu", lower_glu},
    {"glu_backward", lower_glu_backward},
    {"prelu", lower_prelu},
    {"prelu_backward", lower_prelu_backward},
    {"im2col", lower_im2col},
    {"col2im", lower_col2im},
    {"renorm", lower_renorm},
    {"mode", lower_mode},
    {"frexp", lower_frexp},
    {"pdist", lower_pdist},
    {"multi_margin_loss", lower_multi_margin},
    {"multi_margin_loss_backward", lower_multi_margin_backward},
    {"multilabel_margin_loss", lower_multilabel_margin},
    {"multilabel_margin_loss_backward", lower_multilabel_margin_backward},
    {"adaptive_max_pool", lower_adaptive_max_pool},
};

TPU_REGISTER_LOWERINGS(kMisc);

}  // namespace
}  // namespace tpu::lowering
