// Loss functions and their gradients: nll_loss (1d and 2d), mse, binary cross entropy,
// smooth L1, Huber, soft margin. attrs reduction: 0 none, 1 mean, 2 sum (ATen's enum).
#include <cmath>

#include "lowering/cast.h"
#include "lowering/hlo_names.h"
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

constexpr int64_t kNone = 0, kMean = 1;

Value sum_all(Builder& b, Value x) {
  Dims dims;
  for (int64_t i = 0; i < b.type(x).rank(); ++i) dims.push_back(i);
  return b.reduce(x, b.constant(b.dtype(x), 0), dims, ReduceKind::kSum);
}

Value reduce_loss(Builder& b, Value elem, int64_t reduction) {
  if (reduction == kNone) return elem;
  Value s = sum_all(b, elem);
  if (reduction == kMean) s = b.div(s, b.full(b.type(s), static_cast<double>(std::max<int64_t>(b.type(elem).numel(), 0))));
  return s;
}

// d(reduce_loss)/d(elem) times grad_output, broadcast to `shape`.
Value reduce_grad(Builder& b, Value grad_output, const Dims& shape, int64_t reduction) {
  Value g = b.broadcast_to(grad_output, shape);
  if (reduction == kMean) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    g = b.div(g, b.full(b.type(g), static_cast<double>(n)));
  }
  return g;
}

// For nll_loss: the class dim and a mask that is true at [.., target, ..].
struct Picked {
  int64_t class_dim;
  Value onehot;  // bool, self's shape
  Value valid;   // bool, target's shape (target != ignore_index)
};

Picked pick_targets(Builder& b, Value self, Value target, int64_t ignore_index) {
  Picked p;
  const Dims sd = b.dims(self);
  p.class_dim = sd.size() >= 2 ? 1 : 0;
  Dims map;
  for (int64_t i = 0; i < static_cast<int64_t>(sd.size()); ++i) if (i != p.class_dim) map.push_back(i);
  Value t = b.convert(target, ElementType::kI64);
  Value t_full = b.broadcast_in_dim(t, sd, map);
  p.onehot = b.compare(b.iota(TensorType{ElementType::kI64, sd}, p.class_dim), t_full, Compare::kEQ);
  p.valid = b.compare(t, b.full(b.type(t), static_cast<double>(ignore_index)), Compare::kNE);
  return p;
}

// Per-target weight (class weight or 1), zero where the target is ignored.
Value target_weights(Builder& b, const Picked& p, Value self, const Value* weight, const Dims& target_dims) {
  const Dims sd = b.dims(self);
  Value w;
  if (weight != nullptr) {
    Value wf = b.broadcast_in_dim(*weight, sd, {p.class_dim});
    w = b.reduce(b.select(p.onehot, wf, b.full(b.type(wf), 0)), b.constant(b.dtype(wf), 0), {p.class_dim},
                 ReduceKind::kSum);
  } else {
    w = b.full(TensorType{b.dtype(self), target_dims}, 1);
  }
  return b.select(p.valid, w, b.full(b.type(w), 0));
}

// nll_loss: inputs [self, target, (weight)]; attrs reduction, ignore_index, has_weight.
// Outputs: loss, total_weight.
Args lower_nll_loss(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value self = in[0], target = in[1];
  const Value* weight = ctx.attrs.get_bool("has_weight") ? &in[2] : nullptr;
  const Picked p = pick_targets(b, self, target, ctx.attrs.get_int("ignore_index"));
  Value picked = b.reduce(b.select(p.onehot, self, b.full(b.type(self), 0)), b.constant(b.dtype(self), 0),
                          {p.class_dim}, ReduceKind::kSum);
  Value w = target_weights(b, p, self, weight, b.dims(target));
  Value loss = b.neg(b.mul(picked, w));
  const int64_t reduction = ctx.attrs.get_int("reduction");
  if (reduction == kNone) return {loss, b.constant(b.dtype(self), 0)};
  Value total = sum_all(b, w);
  Value s = sum_all(b, loss);
  return {reduction == kMean ? b.div(s, total) : s, total};
}

// nll_loss_backward: inputs [grad_output, self, target, (weight), total_weight]
Args lower_nll_loss_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value grad = in[0], self = in[1], target = in[2];
  const bool has_weight = ctx.attrs.get_bool("has_weight");
  const Value* weight = has_weight ? &in[3] : nullptr;
  Value total = in[has_weight ? 4 : 3];
  const Picked p = pick_targets(b, self, target, ctx.attrs.get_int("ignore_index"));
  const Dims sd = b.dims(self);
  Value w = target_weights(b, p, self, weight, b.dims(target));
  const int64_t reduction = ctx.attrs.get_int("reduction");
  Value scale = b.mul(b.neg(w), b.broadcast_to(grad, b.dims(w)));
  if (reduction == kMean) scale = b.div(scale, b.broadcast_to(total, b.dims(scale)));
  // Ignored targets get exactly 0, as in ATen, even when every target is ignored (total 0).
  scale = b.select(p.valid, scale, b.full(b.type(scale), 0));
  Dims map;
  for (int64_t i = 0; i < static_cast<int64_t>(sd.size()); ++i) if (i != p.class_dim) map.push_back(i);
  Value full = b.broadcast_in_dim(scale, sd, map);
  return {b.select(p.onehot, full, b.full(b.type(self), 0))};
}

Value diff(Builder& b, const Args& in) {
  auto v = broadcast_all(b, {in[0], in[1]});
  return b.sub(v[0], v[1]);
}

Args lower_mse(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value d = diff(b, in);
  return {reduce_loss(b, b.mul(d, d), ctx.attrs.get_int("reduction"))};
}

// mse_loss_backward: inputs [grad, self, target]
Args lower_mse_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value d = diff(b, {in[1], in[2]});
  Value g = reduce_grad(b, in[0], b.dims(d), ctx.attrs.get_int("reduction"));
  return {b.mul(b.mul(b.full(b.type(d), 2.0), d), g)};
}

// binary_cross_entropy: inputs [self, target, (weight)]; logs clamped at -100 as in ATen.
Args lower_bce(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1]});
  Value x = v[0], t = v[1];
  Value floor = b.full(b.type(x), -100.0);
  Value lx = b.max(b.unary("stablehlo.log", x), floor);
  Value l1x = b.max(b.unary("stablehlo.log", b.sub(b.full(b.type(x), 1), x)), floor);
  Value loss = b.neg(b.add(b.mul(t, lx), b.mul(b.sub(b.full(b.type(t), 1), t), l1x)));
  if (in.size() > 2) loss = b.mul(loss, b.broadcast_to(in[2], b.dims(loss)));
  return {reduce_loss(b, loss, ctx.attrs.get_int("reduction"))};
}

// binary_cross_entropy_backward: inputs [grad, self, target, (weight)]
Args lower_bce_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[1], in[2]});
  Value x = v[0], t = v[1];
  Value denom = b.max(b.mul(b.sub(b.full(b.type(x), 1), x), x), b.full(b.type(x), 1e-12));
  Value g = b.div(b.sub(x, t), denom);
  if (in.size() > 3) g = b.mul(g, b.broadcast_to(in[3], b.dims(g)));
  return {b.mul(g, reduce_grad(b, in[0], b.dims(g), ctx.attrs.get_int("reduction")))};
}

// smooth_l1 (attrs beta) and huber (attrs delta)
Args lower_smooth_l1(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const double beta = ctx.attrs.get_float("beta");
  Value z = b.unary("stablehlo.abs", diff(b, in));
  Value loss;
  if (beta == 0) {
    loss = z;
  } else {
    Value quad = b.div(b.mul(b.full(b.type(z), 0.5), b.mul(z, z)), b.full(b.type(z), beta));
    loss = b.select(b.compare(z, b.full(b.type(z), beta), Compare::kLT), quad, b.sub(z, b.full(b.type(z), 0.5 * beta)));
  }
  return {reduce_loss(b, loss, ctx.attrs.get_int("reduction"))};
}

Args lower_smooth_l1_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const double beta = ctx.attrs.get_float("beta");
  Value d = diff(b, {in[1], in[2]});
  Value one = b.full(b.type(d), 1);
  Value sign = b.select(b.compare(d, b.full(b.type(d), 0), Compare::kLT), b.neg(one), one);
  sign = b.select(b.compare(d, b.full(b.type(d), 0), Compare::kEQ), b.full(b.type(d), 0), sign);
  Value g = beta == 0 ? sign
                      : b.select(b.compare(b.unary("stablehlo.abs", d), b.full(b.type(d), beta), Compare::kLT),
                                 b.div(d, b.full(b.type(d), beta)), sign);
  return {b.mul(g, reduce_grad(b, in[0], b.dims(d), ctx.attrs.get_int("reduction")))};
}

Args lower_huber(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const double delta = ctx.attrs.get_float("delta");
  Value z = b.unary("stablehlo.abs", diff(b, in));
  Value quad = b.mul(b.full(b.type(z), 0.5), b.mul(z, z));
  Value lin = b.mul(b.full(b.type(z), delta), b.sub(z, b.full(b.type(z), 0.5 * delta)));
  Value loss = b.select(b.compare(z, b.full(b.type(z), delta), Compare::kLT), quad, lin);
  return {reduce_loss(b, loss, ctx.attrs.get_int("reduction"))};
}

Args lower_huber_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const double delta = ctx.attrs.get_float("delta");
  Value d = diff(b, {in[1], in[2]});
  Value g = b.clamp(b.constant(b.dtype(d), -delta), d, b.constant(b.dtype(d), delta));
  return {b.mul(g, reduce_grad(b, in[0], b.dims(d), ctx.attrs.get_int("reduction")))};
}

// soft_margin: log(1 + exp(-y x))
Args lower_soft_margin(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[0], in[1]});
  Value z = b.neg(b.mul(v[0], v[1]));
  Value loss = b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", z));
  return {reduce_loss(b, loss, ctx.attrs.get_int("reduction"))};
}

Args lower_soft_margin_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  auto v = broadcast_all(b, {in[1], in[2]});
  Value e = b.unary("stablehlo.exponential", b.neg(b.mul(v[0], v[1])));
  Value g = b.div(b.neg(b.mul(v[1], e)), b.add(b.full(b.type(e), 1), e));
  return {b.mul(g, reduce_grad(b, in[0], b.dims(g), ctx.attrs.get_int("reduction")))};
}

const LoweringEntry kLosses[] = {
    {"nll_loss", lower_nll_loss},
    {"nll_loss_backward", lower_nll_loss_backward},
    {"mse_loss", lower_mse},
    {"mse_loss_backward", lower_mse_backward},
    {"binary_cross_entropy", lower_bce},
    {"binary_cross_entropy_backward", lower_bce_backward},
    {"smooth_l1_loss", lower_smooth_l1},
    {"smooth_l1_loss_backward", lower_smooth_l1_backward},
    {"huber_loss", lower_huber},
    {"huber_loss_backward", lower_huber_backward},
    {"soft_margin_loss", lower_soft_margin},
    {"soft_margin_loss_backward", lower_soft_margin_backward},
};

TPU_REGISTER_LOWERINGS(kLosses);

}  // namespace
}  // namespace tpu::lowering
