// Batch, layer and group normalization with their gradients. Inputs arrive in the compute
// dtype (float32 for half types); attrs out_dtype / stats_dtype give the result dtypes.
#include <cmath>

#include "lowering/cast.h"
#include "lowering/hlo_names.h"
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

Value sum(Builder& b, Value x, const Dims& dims) {
  return b.reduce(x, b.constant(b.dtype(x), 0), dims, ReduceKind::kSum);
}

Value mean(Builder& b, Value x, const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= b.dims(x)[d];
  Value s = sum(b, x, dims);
  return b.div(s, b.full(b.type(s), static_cast<double>(n)));
}

// A per-channel [C] value broadcast along dim 1 of `like`.
Value per_channel(Builder& b, Value v, const Dims& like) { return b.broadcast_in_dim(v, like, {1}); }

Dims all_but(int64_t rank, int64_t keep) {
  Dims d;
  for (int64_t i = 0; i < rank; ++i) if (i != keep) d.push_back(i);
  return d;
}

Value out_cast(Context& ctx, Value v, const char* key) { return cast(ctx.b, v, ctx.attrs.get_dtype(key)); }

// batch_norm: inputs [x, (weight), (bias), (running_mean), (running_var)]; attrs has_weight,
// has_bias, has_running, training, momentum, eps, out_dtype, stats_dtype.
// Outputs: out, save_mean, save_invstd (+ new running_mean, running_var when training with
// running stats).
Args lower_batch_norm(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const auto& a = ctx.attrs;
  size_t next = 1;
  Value x = in[0];
  const Dims xd = b.dims(x);
  const int64_t c = xd[1];
  const Dims dims = all_but(static_cast<int64_t>(xd.size()), 1);
  Value w = a.get_bool("has_weight") ? in[next++] : Value{};
  Value bias = a.get_bool("has_bias") ? in[next++] : Value{};
  const bool running = a.get_bool("has_running");
  Value rm = running ? in[next++] : Value{};
  Value rv = running ? in[next++] : Value{};
  const double eps = a.get_float("eps");
  const bool training = a.get_bool("training");
  Value mu, invstd, var;
  if (training) {
    mu = mean(b, x, dims);
    Value centered = b.sub(x, per_channel(b, mu, xd));
    var = mean(b, b.mul(centered, centered), dims);
    invstd = b.unary("stablehlo.rsqrt", b.add(var, b.full(b.type(var), eps)));
  } else {
    mu = rm;
    invstd = b.unary("stablehlo.rsqrt", b.add(rv, b.full(b.type(rv), eps)));
  }
  Value y = b.mul(b.sub(x, per_channel(b, mu, xd)), per_channel(b, invstd, xd));
  if (w.valid()) y = b.mul(y, per_channel(b, w, xd));
  if (bias.valid()) y = b.add(y, per_channel(b, bias, xd));
  Args out{out_cast(ctx, y, "out_dtype")};
  if (training) {
    out.push_back(out_cast(ctx, mu, "stats_dtype"));
    out.push_back(out_cast(ctx, invstd, "stats_dtype"));
    if (running) {
      int64_t n = 1;
      for (int64_t d : dims) n *= xd[d];
      const double m = a.get_float("momentum");
      Value unbiased = b.mul(var, b.full(b.type(var), static_cast<double>(n) / std::max<int64_t>(n - 1, 1)));
      Value keep = b.full(TensorType{b.dtype(rm), {c}}, 1.0 - m);
      Value take = b.full(TensorType{b.dtype(rm), {c}}, m);
      out.push_back(b.add(b.mul(keep, rm), b.mul(take, mu)));
      out.push_back(b.add(b.mul(keep, rv), b.mul(take, unbiased)));
    }
  } else {
    const TensorType empty{a.get_dtype("stats_dtype"), {0}};
    out.push_back(b.full(empty, 0));
    out.push_back(b.full(empty, 0));
  }
  return out;
}

// batch_norm_backward: inputs [grad, x, (weight), mean, invstd_or_var]; attrs has_weight,
// training, eps, output_mask, out_dtype, stats_dtype.
Args lower_batch_norm_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const auto& a = ctx.attrs;
  Value g = in[0], x = in[1];
  size_t next = 2;
  Value w = a.get_bool("has_weight") ? in[next++] : Value{};
  Value mu = in[next++];
  Value stat = in[next++];
  const Dims xd = b.dims(x);
  const Dims dims = all_but(static_cast<int64_t>(xd.size()), 1);
  const bool training = a.get_bool("training");
  Value invstd = training ? stat : b.unary("stablehlo.rsqrt", b.add(stat, b.full(b.type(stat), a.get_float("eps"))));
  Value xhat = b.mul(b.sub(x, per_channel(b, mu, xd)), per_channel(b, invstd, xd));
  Value sum_g = sum(b, g, dims);
  Value sum_gx = sum(b, b.mul(g, xhat), dims);
  Value scale = w.valid() ? b.mul(invstd, w) : invstd;
  Value dx;
  if (training) {
    int64_t n = 1;
    for (int64_t d : dims) n *= xd[d];
    Value inv_n = b.full(b.type(sum_g), 1.0 / static_cast<double>(n));
    Value centered = b.sub(b.sub(g, per_channel(b, b.mul(sum_g, inv_n), xd)),
                           b.mul(xhat, per_channel(b, b.mul(sum_gx, inv_n), xd)));
    dx = b.mul(centered, per_channel(b, scale, xd));
  } else {
    dx = b.mul(g, per_channel(b, scale, xd));
  }
  const Dims& mask = a.get_ints("output_mask");
  Args out;
  if (mask[0]) out.push_back(out_cast(ctx, dx, "out_dtype"));
  if (mask[1]) out.push_back(out_cast(ctx, sum_gx, "stats_dtype"));
  if (mask[2]) out.push_back(out_cast(ctx, sum_g, "stats_dtype"));
  return out;
}

// layer_norm: inputs [x, (weight), (bias)]; attrs axis, eps, has_weight, has_bias, out_dtype.
// Outputs: out, mean, rstd (mean/rstd keep the normalized dims as size 1).
Args lower_layer_norm(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const auto& a = ctx.attrs;
  Value x = in[0];
  const Dims xd = b.dims(x);
  const int64_t axis = a.get_int("axis");
  Dims dims;
  for (int64_t i = axis; i < static_cast<int64_t>(xd.size()); ++i) dims.push_back(i);
  Value mu = mean(b, x, dims);
  Value centered = b.sub(x, expand_reduced(b, mu, xd, dims));
  Value var = mean(b, b.mul(centered, centered), dims);
  Value rstd = b.unary("stablehlo.rsqrt", b.add(var, b.full(b.type(var), a.get_float("eps"))));
  Value y = b.mul(centered, expand_reduced(b, rstd, xd, dims));
  size_t next = 1;
  Dims tail;
  for (int64_t i = axis; i < static_cast<int64_t>(xd.size()); ++i) tail.push_back(i);
  if (a.get_bool("has_weight")) y = b.mul(y, b.broadcast_in_dim(in[next++], xd, tail));
  if (a.get_bool("has_bias")) y = b.add(y, b.broadcast_in_dim(in[next++], xd, tail));
  return {out_cast(ctx, y, "out_dtype"), out_cast(ctx, keep_dims(b, mu, xd, dims), "out_dtype"),
          out_cast(ctx, keep_dims(b, rstd, xd, dims), "out_dtype")};
}

// The input gradient shared by layer and group norm: rstd * (gw - mean(gw) - xhat*mean(gw*xhat))
// over `dims`.
Value norm_input_grad(Builder& b, Value gw, Value xhat, Value rstd_full, const Dims& dims) {
  const Dims d = b.dims(gw);
  Value m1 = expand_reduced(b, mean(b, gw, dims), d, dims);
  Value m2 = expand_reduced(b, mean(b, b.mul(gw, xhat), dims), d, dims);
  return b.mul(rstd_full, b.sub(b.sub(gw, m1), b.mul(xhat, m2)));
}

// layer_norm_backward: inputs [grad, x, mean, rstd, (weight)]; attrs axis, has_weight,
// output_mask, out_dtype, param_dtype.
Args lower_layer_norm_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const auto& a = ctx.attrs;
  Value g = in[0], x = in[1];
  const Dims xd = b.dims(x);
  const int64_t axis = a.get_int("axis");
  Dims norm_dims, lead_dims, tail;
  for (int64_t i = 0; i < static_cast<int64_t>(xd.size()); ++i) (i >= axis ? norm_dims : lead_dims).push_back(i);
  for (int64_t i = axis; i < static_cast<int64_t>(xd.size()); ++i) tail.push_back(i);
  Value mu = b.broadcast_to(in[2], xd);
  Value rstd = b.broadcast_to(in[3], xd);
  Value xhat = b.mul(b.sub(x, mu), rstd);
  Value gw = a.get_bool("has_weight") ? b.mul(g, b.broadcast_in_dim(in[4], xd, tail)) : g;
  const Dims& mask = a.get_ints("output_mask");
  Args out;
  if (mask[0]) out.push_back(out_cast(ctx, norm_input_grad(b, gw, xhat, rstd, norm_dims), "out_dtype"));
  if (mask[1]) out.push_back(out_cast(ctx, sum(b, b.mul(g, xhat), lead_dims), "param_dtype"));
  if (mask[2]) out.push_back(out_cast(ctx, sum(b, g, lead_dims), "param_dtype"));
  return out;
}

// group_norm: inputs [x, (weight), (bias)]; attrs N, C, HxW, group, eps, has_weight, has_bias,
// out_dtype. Outputs: out, mean [N, G], rstd [N, G].
Args lower_group_norm(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const auto& a = ctx.attrs;
  const int64_t n = a.get_int("N"), c = a.get_int("C"), hw = a.get_int("HxW"), g = a.get_int("group");
  Value x = in[0];
  const Dims xd = b.dims(x);
  Value xr = b.reshape(x, {n, g, (c / g) * hw});
  Value mu = mean(b, xr, {2});
  Value centered = b.sub(xr, expand_reduced(b, mu, b.dims(xr), {2}));
  Value var = mean(b, b.mul(centered, centered), {2});
  Value rstd = b.unary("stablehlo.rsqrt", b.add(var, b.full(b.type(var), a.get_float("eps"))));
  Value y = b.reshape(b.mul(centered, expand_reduced(b, rstd, b.dims(xr), {2})), {n, c, hw});
  size_t next = 1;
  if (a.get_bool("has_weight")) y = b.mul(y, b.broadcast_in_dim(in[next++], {n, c, hw}, {1}));
  if (a.get_bool("has_bias")) y = b.add(y, b.broadcast_in_dim(in[next++], {n, c, hw}, {1}));
  return {out_cast(ctx, b.reshape(y, xd), "out_dtype"), out_cast(ctx, mu, "out_dtype"), out_cast(ctx, rstd, "out_dtype")};
}

// group_norm_backward: inputs [grad, x, mean, rstd, (weight)]; attrs N, C, HxW, group,
// has_weight, output_mask, out_dtype.
Args lower_group_norm_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const auto& a = ctx.attrs;
  const int64_t n = a.get_int("N"), c = a.get_int("C"), hw = a.get_int("HxW"), g = a.get_int("group");
  const Dims xd = b.dims(in[1]);
  const Dims flat{n, c, hw};
  const Dims grouped{n, g, (c / g) * hw};
  Value grad = b.reshape(in[0], flat);
  Value x = b.reshape(in[1], grouped);
  Value mu = b.broadcast_in_dim(in[2], grouped, {0, 1});
  Value rstd = b.broadcast_in_dim(in[3], grouped, {0, 1});
  Value xhat = b.mul(b.sub(x, mu), rstd);
  Value gw = grad;
  if (a.get_bool("has_weight")) gw = b.mul(grad, b.broadcast_in_dim(in[4], flat, {1}));
  const Dims& mask = a.get_ints("output_mask");
  Args out;
  if (mask[0]) {
    Value dx = norm_input_grad(b, b.reshape(gw, grouped), xhat, rstd, {2});
    out.push_back(out_cast(ctx, b.reshape(dx, xd), "out_dtype"));
  }
  Value xhat_flat = b.reshape(xhat, flat);
  if (mask[1]) out.push_back(out_cast(ctx, sum(b, b.mul(grad, xhat_flat), {0, 2}), "out_dtype"));
  if (mask[2]) out.push_back(out_cast(ctx, sum(b, grad, {0, 2}), "out_dtype"));
  return out;
}

const LoweringEntry kNormalization[] = {
    {"batch_norm", lower_batch_norm},
    {"batch_norm_backward", lower_batch_norm_backward},
    {"layer_norm", lower_layer_norm},
    {"layer_norm_backward", lower_layer_norm_backward},
    {"group_norm", lower_group_norm},
    {"group_norm_backward", lower_group_norm_backward},
};

TPU_REGISTER_LOWERINGS(kNormalization);

}  // namespace
}  // namespace tpu::lowering
