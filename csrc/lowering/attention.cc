// Scaled dot-product attention as one program: softmax(scale * Q K^T + bias) V with the causal
// mask, the attention bias, dropout and grouped-query heads folded in, and its gradient as a
// second program that recomputes the probabilities from the saved logsumexp. See attention.h
// for the inputs, outputs and attributes.
//
// Inside both programs heads are split as [N, Hk, G, L, *]: query head h = hk * G + g uses key
// head hk (repeat_interleave's grouping), so grouped-query attention never copies K or V.
// Half-precision inputs are computed in float32, like PyTorch's math path; rows that mask out
// every key give zeros (PyTorch's _safe_softmax), with logsumexp -inf.
#include "lowering/attention.h"

#include <cmath>
#include <stdexcept>

#include "lowering/hlo_names.h"
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {



// The sizes of one attention call, from q [.., Hq, L, E], k [.., Hk, S, E], v [.., Hk, S, Ev].
struct Geometry {
  int64_t rank = 4, n = 1, hq = 1, hk = 1, l = 1, s = 1, e = 1, ev = 1;
  int64_t groups() const { return hq / hk; }
  // Matrix products run on [N * Hk, G * L, *] x [N * Hk, S, *] (one batch dim: XLA CPU's fast
  // path); the reshapes to and from the 5-D view are free.
  Dims rows3(int64_t last) const { return {n * hk, groups() * l, last}; }
  Dims kv3(int64_t last) const { return {n * hk, s, last}; }
  Dims scores5() const { return {n, hk, groups(), l, s}; }
  // The attention matrix in the inputs' rank: [.., Hq, L, S].
  Dims scores_logical() const {
    return rank == 3 ? Dims{hq, l, s} : Dims{n, hq, l, s};
  }
  Dims per_query(int64_t last) const {  // [.., Hq, L, last]
    return rank == 3 ? Dims{hq, l, last} : Dims{n, hq, l, last};
  }
  Dims per_key(int64_t last) const {  // [.., Hk, S, last]
    return rank == 3 ? Dims{hk, s, last} : Dims{n, hk, s, last};
  }
};

Geometry geometry(Builder& b, Value q, Value k, Value v) {
  const Dims qd = b.dims(q), kd = b.dims(k), vd = b.dims(v);
  Geometry g;
  g.rank = static_cast<int64_t>(qd.size());
  if ((g.rank != 3 && g.rank != 4) || kd.size() != qd.size() || vd.size() != qd.size()) {
    throw std::invalid_argument("sdpa: query, key and value must all be 3-D or all 4-D, got " + b.type(q).str() +
                                ", " + b.type(k).str() + ", " + b.type(v).str());
  }
  const int64_t o = g.rank - 3;  // index of the heads dim
  g.n = g.rank == 4 ? qd[0] : 1;
  g.hq = qd[o];
  g.hk = kd[o];
  g.l = qd[o + 1];
  g.s = kd[o + 1];
  g.e = qd[o + 2];
  g.ev = vd[o + 2];
  const bool ok = (g.rank == 3 || (kd[0] == g.n && vd[0] == g.n)) && vd[o] == g.hk && g.hk > 0 &&
                  g.hq % g.hk == 0 && kd[o + 2] == g.e && vd[o + 1] == g.s;
  if (!ok) {
    throw std::invalid_argument("sdpa: incompatible shapes " + b.type(q).str() + ", " + b.type(k).str() + ", " +
                                b.type(v).str());
  }
  return g;
}

ElementType compute_type(ElementType t) { return t == ElementType::kF64 ? t : ElementType::kF32; }

// The pieces shared by the forward and the backward program.
struct Operands {
  Geometry g;
  ElementType t = ElementType::kF32;  // compute type
  Value q3, k3, v3;  // [N * Hk, G * L, E], [N * Hk, S, E], [N * Hk, S, Ev]
  Value bias;  // invalid when there is none
  double scale = 1.0;
  bool causal = false;
  double dropout_p = 0.0;
};

Operands operands(Context& ctx, const std::vector<Value>& in, size_t first) {
  auto& b = ctx.b;
  Operands o;
  Value q = in[first], k = in[first + 1], v = in[first + 2];
  o.g = geometry(b, q, k, v);
  o.t = compute_type(b.dtype(q));
  o.q3 = b.reshape(b.convert(q, o.t), o.g.rows3(o.g.e));
  o.k3 = b.reshape(b.convert(k, o.t), o.g.kv3(o.g.e));
  o.v3 = b.reshape(b.convert(v, o.t), o.g.kv3(o.g.ev));
  if (ctx.attrs.get_bool("has_bias", false)) o.bias = in[first + 3];
  o.scale = ctx.attrs.get_float("scale");
  o.causal = ctx.attrs.get_bool("is_causal", false);
  o.dropout_p = ctx.attrs.get_float("dropout_p");
  return o;
}

// scale * Q K^T + bias, with -inf where the causal mask hides a key: [N, Hk, G, L, S].
Value scores(Builder& b, const Operands& o) {
  const Dims shape = o.g.scores5();
  Value s = b.reshape(b.dot_general(o.q3, o.k3, {0}, {0}, {2}, {2}, o.t, true), shape);
  s = b.mul(s, b.full(b.type(s), o.scale));
  if (o.bias.valid()) {
    Value bias = o.bias;
    if (b.dtype(bias) == ElementType::kBool) {  // True takes part in attention
      bias = b.select(bias, b.full(TensorType{o.t, b.dims(bias)}, 0.0), b.full(TensorType{o.t, b.dims(bias)}, -INFINITY));
    }
    bias = b.broadcast_to(b.convert(bias, o.t), o.g.scores_logical());
    s = b.add(s, b.reshape(bias, shape));
  }
  if (o.causal) {  // key j is visible to query i when j <= i (tril of ones(L, S))
    Value row = b.iota(TensorType{ElementType::kI64, shape}, 3);
    Value col = b.iota(TensorType{ElementType::kI64, shape}, 4);
    s = b.select(b.compare(col, row, Compare::kLE), s, b.full(b.type(s), -INFINITY));
  }
  return s;
}

// Dropout's keep mask for the attention matrix: the same (seed, offset) gives the same mask in
// the forward and the backward. Uniform draws of 24 bits, as the dropout op makes them.
Value keep_mask(Builder& b, const Operands& o, Value seed_u64, Value offset_u64) {
  const Dims shape = o.g.scores5();
  Value state = b.concatenate({b.reshape(seed_u64, {1}), b.reshape(offset_u64, {1})}, 0);
  Value bits = b.rng_bit_generator(state, TensorType{ElementType::kU32, shape}).second;
  Value top = b.binary("stablehlo.shift_right_logical", bits, b.full(b.type(bits), 8));
  Value u = b.mul(b.convert(top, ElementType::kF32), b.full(TensorType{ElementType::kF32, shape}, std::ldexp(1.0, -24)));
  return b.compare(u, b.full(b.type(u), 1.0 - o.dropout_p), Compare::kLT);
}

// x where keep, else 0, scaled by 1 / (1 - p).
Value apply_dropout(Builder& b, const Operands& o, Value x, Value keep) {
  Value scaled = b.mul(x, b.full(b.type(x), 1.0 / (1.0 - o.dropout_p)));
  return b.select(keep, scaled, b.full(b.type(x), 0.0));
}

Value expand_rows(Builder& b, Value rows, const Dims& shape) {  // [N,Hk,G,L] -> [N,Hk,G,L,S]
  return b.broadcast_in_dim(rows, shape, {0, 1, 2, 3});
}

// Softmax over the key axis of the scores [N,Hk,G,L,S]; rows whose keys are all masked give 0.
// The backward recomputes P with this same sequence rather than as exp(S - logsumexp): with
// scores of magnitude ~50 that subtraction cancels and costs a decimal digit in dQ and dK.
// `lse` (optional) receives the rows' logsumexp (-inf for an all-masked row).
Value softmax_rows(Builder& b, Value s, const Dims& shape, Value* lse) {
  const ElementType t = b.dtype(s);
  Value m = b.reduce(s, b.constant(t, -INFINITY), {4}, ReduceKind::kMax);
  // A row whose keys are all masked has max -inf: shift by 0 there so exp gives 0, not nan.
  Value m_safe = b.select(b.compare(m, b.full(b.type(m), -INFINITY), Compare::kEQ), b.full(b.type(m), 0.0), m);
  Value e = b.unary("stablehlo.exponential", b.sub(s, expand_rows(b, m_safe, shape)));
  Value sum = b.reduce(e, b.constant(t, 0.0), {4}, ReduceKind::kSum);
  Value empty_row = b.compare(sum, b.full(b.type(sum), 0.0), Compare::kEQ);
  Value p = b.div(e, expand_rows(b, sum, shape));
  if (lse != nullptr) *lse = b.add(m_safe, b.unary("stablehlo.log", sum));
  return b.select(expand_rows(b, empty_row, shape), b.full(b.type(p), 0.0), p);
}

// Returns `v` (logical dims) permuted to the memory order `order` (outermost first).
Value to_order(Builder& b, Value v, const Context& ctx, const char* key) {
  return ctx.attrs.has(key) ? b.transpose(v, ctx.attrs.get_ints(key)) : v;
}

std::vector<Value> lower_sdpa_fwd(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  Operands o = operands(ctx, in, 0);
  const Dims shape = o.g.scores5();
  Value lse;
  Value p = softmax_rows(b, scores(b, o), shape, &lse);
  const size_t rng_at = o.bias.valid() ? 4 : 3;
  Value seed = b.constant_int(ElementType::kI64, 0), offset = b.constant_int(ElementType::kI64, 0);
  if (o.dropout_p > 0) {
    p = apply_dropout(b, o, p, keep_mask(b, o, in[rng_at], in[rng_at + 1]));
    seed = b.bitcast_convert(in[rng_at], TensorType{ElementType::kI64, {}});
    offset = b.bitcast_convert(in[rng_at + 1], TensorType{ElementType::kI64, {}});
  }
  Value p3 = b.reshape(p, o.g.rows3(o.g.s));
  Value out = b.dot_general(p3, o.v3, {0}, {0}, {2}, {1}, o.t, true);  // [N * Hk, G * L, Ev]
  out = b.convert(b.reshape(out, o.g.per_query(o.g.ev)), b.dtype(in[0]));
  lse = b.convert(b.reshape(lse, {o.g.n, o.g.hq, o.g.l}), ElementType::kF32);
  return {to_order(b, out, ctx, "out_order"), lse, seed, offset};
}

// Sums `grad` (the attention matrix's shape) over the dims `bias` was broadcast along.
Value reduce_to_bias(Builder& b, Value grad, const Dims& bias_dims) {
  const Dims full = b.dims(grad);
  const size_t lead = full.size() - bias_dims.size();
  Dims reduce_dims;
  for (size_t i = 0; i < full.size(); ++i) {
    const bool missing = i < lead;
    if (missing || (bias_dims[i - lead] == 1 && full[i] != 1)) reduce_dims.push_back(static_cast<int64_t>(i));
  }
  Value r = b.reduce(grad, b.constant(b.dtype(grad), 0.0), reduce_dims, ReduceKind::kSum);
  return b.reshape(r, bias_dims);
}

std::vector<Value> lower_sdpa_bwd(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  Operands o = operands(ctx, in, 1);
  const Geometry& g = o.g;
  const Dims shape = g.scores5();
  size_t next = o.bias.valid() ? 5 : 4;
  ++next;  // the forward's logsumexp: P is recomputed exactly as the forward made it (softmax_rows)
  Value out;  // the forward's output, when given
  if (ctx.attrs.get_bool("has_out", false)) out = in[next++];
  Value p = softmax_rows(b, scores(b, o), shape, nullptr);
  Value keep;
  Value pd = p;  // the probabilities after dropout, as they multiplied V
  if (o.dropout_p > 0) {
    Value seed = b.bitcast_convert(b.convert(b.reshape(in[next], {}), ElementType::kI64), TensorType{ElementType::kU64, {}});
    Value offset = b.bitcast_convert(b.convert(b.reshape(in[next + 1], {}), ElementType::kI64), TensorType{ElementType::kU64, {}});
    keep = keep_mask(b, o, seed, offset);
    pd = apply_dropout(b, o, p, keep);
  }
  Value d_out = b.reshape(b.convert(in[0], o.t), g.rows3(g.ev));
  std::vector<Value> outs;
  Value dp = b.reshape(b.dot_general(d_out, o.v3, {0}, {0}, {2}, {2}, o.t, true), shape);
  if (keep.valid()) dp = apply_dropout(b, o, dp, keep);
  // Softmax backward: dS = P * (dP - sum(dP * P)). With the forward's output O = dropout(P) V,
  // sum_j dP_ij P_ij = sum_e dO_ie O_ie (as PyTorch's CPU flash-attention backward takes it): a
  // sum over the head dim, independent of the dP product. Summed over the keys, XLA's CPU
  // compiler puts the dP product, this sum and dS in one YNNPACK fusion that runs several times
  // slower than the product and the elementwise parts apart.
  Value row_dot;
  if (out.valid()) {
    Value o3 = b.reshape(b.convert(out, o.t), g.rows3(g.ev));
    row_dot = b.reshape(b.reduce(b.mul(d_out, o3), b.constant(o.t, 0.0), {2}, ReduceKind::kSum),
                        {g.n, g.hk, g.groups(), g.l});
  } else {
    row_dot = b.reduce(b.mul(dp, p), b.constant(o.t, 0.0), {4}, ReduceKind::kSum);
  }
  Value ds = b.reshape(b.mul(p, b.sub(dp, expand_rows(b, row_dot, shape))), g.rows3(g.s));
  if (ctx.attrs.get_bool("want_q", true)) {
    Value dq = b.dot_general(ds, o.k3, {0}, {0}, {2}, {1}, o.t, true);  // [N * Hk, G * L, E]
    dq = b.mul(dq, b.full(b.type(dq), o.scale));
    dq = b.convert(b.reshape(dq, g.per_query(g.e)), b.dtype(in[1]));
    outs.push_back(to_order(b, dq, ctx, "q_order"));
  }
  if (ctx.attrs.get_bool("want_k", true)) {
    Value dk = b.dot_general(ds, o.q3, {0}, {0}, {1}, {1}, o.t, true);  // [N * Hk, S, E]
    dk = b.mul(dk, b.full(b.type(dk), o.scale));
    dk = b.convert(b.reshape(dk, g.per_key(g.e)), b.dtype(in[2]));
    outs.push_back(to_order(b, dk, ctx, "k_order"));
  }
  if (ctx.attrs.get_bool("want_v", true)) {
    Value dv = b.dot_general(b.reshape(pd, g.rows3(g.s)), d_out, {0}, {0}, {1}, {1}, o.t, true);  // [N * Hk, S, Ev]
    dv = b.convert(b.reshape(dv, g.per_key(g.ev)), b.dtype(in[3]));
    outs.push_back(to_order(b, dv, ctx, "v_order"));
  }
  if (o.bias.valid() && ctx.attrs.get_bool("want_bias", false)) {
    if (b.dtype(o.bias) == ElementType::kBool) throw std::invalid_argument("sdpa: a boolean mask has no gradient");
    Value db = reduce_to_bias(b, b.reshape(ds, g.scores_logical()), b.dims(o.bias));
    outs.push_back(b.convert(db, b.dtype(o.bias)));
  }
  return outs;
}

TPU_REGISTER_LOWERING(attention::kForward, lower_sdpa_fwd);
TPU_REGISTER_LOWERING(attention::kBackward, lower_sdpa_bwd);

}  // namespace
}  // namespace tpu::lowering
