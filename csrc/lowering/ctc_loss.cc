// CTC loss (Graves et al. 2006) forward and backward, with ATen's CPU kernel's math in log
// space: the alpha recursion over time is one stablehlo.while (the forward), beta another (the
// backward), each step vectorised over the batch and the extended target (blanks between
// labels). Lengths arrive as device tensors, so one executable serves every batch of a shape.
//
// Shared inputs: log_probs [T, N, C], targets flat [K] (int64), lengths [3, N] int64 (input
// lengths, target lengths, offset of each sample's targets in the flat targets).
// attrs: blank, max_target (S; the extended target has L = 2S+1 positions).
#include <cmath>

#include "lowering/hlo_names.h"
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;
constexpr ElementType kI64 = ElementType::kI64;


Value and_(Builder& b, Value x, Value y) { return b.binary("stablehlo.and", x, y); }
Value neg_inf(Builder& b, const TensorType& t) { return b.full(t, -INFINITY); }

// What both directions need about one call, all [.., N, L]-shaped.
struct Lattice {
  int64_t T = 0, N = 0, C = 0, L = 0;
  ElementType dt = ElementType::kF32;
  Value il, tl;       // [N] lengths
  Value lp_index;     // [T, N, L] flat index into log_probs of (t, n, label'[n, s])
  Value lp_ext;       // [T, N, L] log_probs at the extended target's labels
  Value skip;         // [N, L] alpha may come from s-2 (label'[s] != label'[s-2])
  Value valid_s;      // [N, L] s < 2 * target_length + 1
  Value s_iota;       // [N, L] s
};

Value row(Builder& b, Value lengths, int64_t i, int64_t n) {
  return b.reshape(b.slice(lengths, {i, 0}, {i + 1, n}, {1, 1}), {n});
}

Lattice build_lattice(Builder& b, const Attrs& attrs, Value log_probs, Value targets, Value lengths) {
  Lattice x;
  const Dims d = b.dims(log_probs);
  x.T = d[0], x.N = d[1], x.C = d[2];
  x.dt = b.dtype(log_probs);
  const int64_t S = attrs.get_int("max_target"), blank = attrs.get_int("blank");
  x.L = 2 * S + 1;
  const int64_t N = x.N, L = x.L, T = x.T;
  x.il = row(b, lengths, 0, N);
  x.tl = row(b, lengths, 1, N);
  Value offsets = row(b, lengths, 2, N);
  const TensorType nl{kI64, {N, L}};
  x.s_iota = b.iota(nl, 1);
  Value blank_full = b.full(nl, static_cast<double>(blank));
  Value odd = b.compare(b.binary("stablehlo.remainder", x.s_iota, b.full(nl, 2)), b.full(nl, 1), Compare::kEQ);
  // label'[n, s]: blank at even s, targets[offset[n] + (s-1)/2] at odd s (clamped; masked later)
  Value label = blank_full;
  const int64_t K = b.type(targets).numel();
  if (K > 0 && S > 0) {
    Value pos = b.add(b.broadcast_in_dim(offsets, {N, L}, {0}),
                      b.div(b.sub(x.s_iota, b.full(nl, 1)), b.full(nl, 2)));
    pos = b.clamp(b.constant_int(kI64, 0), pos, b.constant_int(kI64, K - 1));
    Value flat = b.reshape(b.convert(targets, kI64), {K});
    label = b.select(odd, b.gather_flat(flat, pos), blank_full);
  }
  // Labels outside [0, C) would read out of bounds: clamp (ATen does not check them either).
  label = b.clamp(b.constant_int(kI64, 0), label, b.constant_int(kI64, x.C - 1));
  Value prev2 = b.slice(b.pad(label, b.constant_int(kI64, -1), {0, 2}, {0, 0}, {0, 0}), {0, 0}, {N, L}, {1, 1});
  x.skip = b.compare(label, prev2, Compare::kNE);
  x.skip = and_(b, x.skip, b.compare(x.s_iota, b.full(nl, 1), Compare::kGT));
  Value two_tl = b.mul(b.broadcast_in_dim(x.tl, {N, L}, {0}), b.full(nl, 2));
  x.valid_s = b.compare(x.s_iota, two_tl, Compare::kLE);
  if (T > 0) {
    const TensorType tnl{kI64, {T, N, L}};
    Value base = b.add(b.mul(b.iota(tnl, 0), b.full(tnl, static_cast<double>(N * x.C))),
                       b.mul(b.iota(tnl, 1), b.full(tnl, static_cast<double>(x.C))));
    x.lp_index = b.add(base, b.broadcast_in_dim(label, {T, N, L}, {1, 2}));
    x.lp_ext = b.gather_flat(b.reshape(log_probs, {T * N * x.C}), x.lp_index);
  }
  return x;
}

// ATen's three-way log-add: log(e^a + e^b + e^c) around their max (0 when all are -inf).
Value log_add3(Builder& b, Value a, Value c, Value e) {
  const TensorType t = b.type(a);
  Value m = b.max(b.max(a, c), e);
  m = b.select(b.compare(m, neg_inf(b, t), Compare::kEQ), b.full(t, 0), m);
  Value sum = b.add(b.add(b.unary("stablehlo.exponential", b.sub(a, m)), b.unary("stablehlo.exponential", b.sub(c, m))),
                    b.unary("stablehlo.exponential", b.sub(e, m)));
  return b.add(b.unary("stablehlo.log", sum), m);
}

// v shifted along s by `k` (positive: v[s-k], negative: v[s+|k|]), -inf where it runs out.
Value shift(Builder& b, Value v, int64_t k) {
  const Dims d = b.dims(v);
  Value fill = b.constant(b.dtype(v), -INFINITY);
  if (k > 0) return b.slice(b.pad(v, fill, {0, k}, {0, 0}, {0, 0}), {0, 0}, d, {1, 1});
  return b.slice(b.pad(v, fill, {0, 0}, {0, -k}, {0, 0}), {0, -k}, {d[0], d[1] - k}, {1, 1});
}

// [N, L] mask of t < input_length (t a rank-0 i64).
Value before_end(Builder& b, const Lattice& x, Value t, int64_t offset) {
  Value il = b.broadcast_in_dim(x.il, {x.N, x.L}, {0});
  Value tt = b.add(b.broadcast_in_dim(t, {x.N, x.L}, {}), b.full(TensorType{kI64, {x.N, x.L}}, static_cast<double>(offset)));
  return b.compare(tt, il, Compare::kLT);
}

// log_alpha as [T, N, L]: -inf outside t < input_length, s <= 2 * target_length.
Value alpha(Builder& b, const Lattice& x) {
  const int64_t N = x.N, L = x.L;
  const TensorType nl{x.dt, {N, L}};
  Value z = b.constant_int(kI64, 0);
  Value first = b.compare(x.s_iota, b.full(TensorType{kI64, {N, L}}, 2), Compare::kLT);
  Value start = and_(b, and_(b, first, x.valid_s), before_end(b, x, z, 0));
  Value a0 = b.select(start, index_dim0(b, x.lp_ext, z), neg_inf(b, nl));
  Value la = update_dim0(b, neg_inf(b, TensorType{x.dt, {x.T, N, L}}), a0, z);
  auto out = b.while_loop(
      {b.constant_int(kI64, 1), a0, la},
      [&](const Args& s) { return Args{b.compare(s[0], b.constant_int(kI64, x.T), Compare::kLT)}; },
      [&](const Args& s) {
        Value t = s[0], prev = s[1];
        Value from_skip = b.select(x.skip, shift(b, prev, 2), neg_inf(b, nl));
        Value cur = b.add(log_add3(b, prev, shift(b, prev, 1), from_skip), index_dim0(b, x.lp_ext, t));
        cur = b.select(and_(b, x.valid_s, before_end(b, x, t, 0)), cur, neg_inf(b, nl));
        return Args{b.add(t, b.constant_int(kI64, 1)), cur, update_dim0(b, s[2], cur, t)};
      });
  return out[2];
}

// log_beta as [T, N, L], the same recursion run backwards from t = input_length - 1.
Value beta(Builder& b, const Lattice& x) {
  const int64_t N = x.N, L = x.L;
  const TensorType nl{x.dt, {N, L}};
  const TensorType il{kI64, {N, L}};
  Value two_tl = b.mul(b.broadcast_in_dim(x.tl, {N, L}, {0}), b.full(il, 2));
  // the end: s = 2*tl (blank) and s = 2*tl - 1 (the last label; tl > 0 keeps it >= 0 and odd)
  Value last = b.binary("stablehlo.or", b.compare(x.s_iota, two_tl, Compare::kEQ),
                        b.compare(b.add(x.s_iota, b.full(il, 1)), two_tl, Compare::kEQ));
  Value skip_ahead = shift(b, b.convert(x.skip, x.dt), -2);  // skip[s+2], -inf when out of range
  Value can_skip = b.compare(skip_ahead, b.full(nl, 0), Compare::kGT);
  auto out = b.while_loop(
      {b.constant_int(kI64, x.T - 1), neg_inf(b, nl), neg_inf(b, TensorType{x.dt, {x.T, N, L}})},
      [&](const Args& s) { return Args{b.compare(s[0], b.constant_int(kI64, 0), Compare::kGE)}; },
      [&](const Args& s) {
        Value t = s[0], next = s[1];
        Value lp = index_dim0(b, x.lp_ext, t);
        Value from_skip = b.select(can_skip, shift(b, next, -2), neg_inf(b, nl));
        Value rec = b.add(log_add3(b, next, shift(b, next, -1), from_skip), lp);
        Value at_end = and_(b, before_end(b, x, t, 0), b.unary("stablehlo.not", before_end(b, x, t, 1)));
        Value cur = b.select(at_end, b.select(last, lp, neg_inf(b, nl)), rec);
        cur = b.select(and_(b, x.valid_s, before_end(b, x, t, 0)), cur, neg_inf(b, nl));
        return Args{b.sub(t, b.constant_int(kI64, 1)), cur, update_dim0(b, s[2], cur, t)};
      });
  return out[2];
}

Builder::ScatterDims point_scatter() {
  Builder::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  return s;
}

// ctc_loss: inputs [log_probs, targets, lengths] -> (neg_log_likelihood [N], log_alpha [N, T, L])
Args lower_ctc_loss(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Lattice x = build_lattice(b, ctx.attrs, in[0], in[1], in[2]);
  const int64_t N = x.N, L = x.L, T = x.T;
  const TensorType nt{x.dt, {N}};
  const TensorType ni{kI64, {N}};
  Value zero_len = b.compare(x.il, b.full(ni, 0), Compare::kEQ);
  Value no_target = b.compare(x.tl, b.full(ni, 0), Compare::kEQ);
  // empty input: likelihood 1 for an empty target, else 0 (ATen's rule)
  Value empty_ll = b.select(no_target, b.full(nt, 0), neg_inf(b, nt));
  if (T == 0) return {b.neg(empty_ll), b.full(TensorType{x.dt, {N, 0, L}}, 0)};
  Value la = alpha(b, x);
  Value t_end = b.max(b.sub(x.il, b.full(ni, 1)), b.full(ni, 0));
  Value base = b.add(b.mul(t_end, b.full(ni, static_cast<double>(N * L))),
                     b.mul(b.iota(ni, 0), b.full(ni, static_cast<double>(L))));
  Value two_tl = b.mul(x.tl, b.full(ni, 2));
  Value flat = b.reshape(la, {T * N * L});
  Value l1 = b.gather_flat(flat, b.add(base, two_tl));
  Value l2 = b.gather_flat(flat, b.add(base, b.max(b.sub(two_tl, b.full(ni, 1)), b.full(ni, 0))));
  l2 = b.select(no_target, neg_inf(b, nt), l2);
  Value m = b.max(l1, l2);
  m = b.select(b.compare(m, neg_inf(b, nt), Compare::kEQ), b.full(nt, 0), m);
  Value ll = b.add(b.unary("stablehlo.log", b.add(b.unary("stablehlo.exponential", b.sub(l1, m)),
                                                  b.unary("stablehlo.exponential", b.sub(l2, m)))), m);
  ll = b.select(zero_len, empty_ll, ll);
  return {b.neg(ll), b.transpose(la, {1, 0, 2})};
}

// ctc_loss_backward: inputs [grad [N], log_probs, targets, lengths, nll [N], log_alpha [N, T, L]];
// attrs also zero_infinity -> grad of log_probs [T, N, C].
Args lower_ctc_loss_backward(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Lattice x = build_lattice(b, ctx.attrs, in[1], in[2], in[3]);
  const int64_t N = x.N, L = x.L, T = x.T, C = x.C;
  const TensorType tnc{x.dt, {T, N, C}};
  if (T == 0 || N == 0 || C == 0) return {b.full(tnc, 0)};
  const bool zero_infinity = ctx.attrs.get_bool("zero_infinity");
  Value lb = beta(b, x);
  Value la = b.transpose(in[5], {1, 0, 2});
  // alpha * beta summed (in log space) over the positions s sharing a label: one scatter-max
  // for the stabiliser, one scatter-add of the exponentials.
  Value ab = b.add(la, lb);
  const TensorType tnl{x.dt, {T, N, L}};
  Value s_ok = b.broadcast_in_dim(x.valid_s, {T, N, L}, {1, 2});
  Value t_ok = b.compare(b.iota(TensorType{kI64, {T, N, L}}, 0), b.broadcast_in_dim(x.il, {T, N, L}, {1}), Compare::kLT);
  ab = b.select(and_(b, s_ok, t_ok), ab, neg_inf(b, tnl));
  const int64_t M = T * N * L, F = T * N * C;
  Value idx = b.reshape(x.lp_index, {M, 1});
  Value ab_flat = b.reshape(ab, {M});
  Value mx = b.scatter(b.full(TensorType{x.dt, {F}}, -INFINITY), idx, ab_flat, point_scatter(), "stablehlo.maximum");
  Value mx_safe = b.select(b.compare(mx, b.full(b.type(mx), -INFINITY), Compare::kEQ), b.full(b.type(mx), 0), mx);
  Value terms = b.unary("stablehlo.exponential", b.sub(ab_flat, b.gather_flat(mx_safe, b.reshape(x.lp_index, {M}))));
  Value sums = b.scatter(b.full(TensorType{x.dt, {F}}, 0), idx, terms, point_scatter(), "stablehlo.add");
  Value collected = b.reshape(b.add(b.unary("stablehlo.log", sums), mx_safe), {T, N, C});
  // grad = (exp(lp) - exp(collected + nll - lp)) * grad_out, zero past each input's end
  Value lp = in[1];
  Value nll = b.broadcast_in_dim(in[4], {T, N, C}, {1});
  Value gr = b.broadcast_in_dim(b.broadcast_to(in[0], {N}), {T, N, C}, {1});
  Value g = b.mul(b.sub(b.unary("stablehlo.exponential", lp),
                        b.unary("stablehlo.exponential", b.sub(b.add(collected, nll), lp))),
                  gr);
  Value live = b.compare(b.iota(TensorType{kI64, {T, N, C}}, 0), b.broadcast_in_dim(x.il, {T, N, C}, {1}), Compare::kLT);
  if (zero_infinity) {
    Value finite = b.compare(nll, b.full(tnc, INFINITY), Compare::kNE);
    live = and_(b, live, finite);
  }
  return {b.select(live, g, b.full(tnc, 0))};
}

const LoweringEntry kCtc[] = {
    {"ctc_loss", lower_ctc_loss},
    {"ctc_loss_backward", lower_ctc_loss_backward},
};

TPU_REGISTER_LOWERINGS(kCtc);

}  // namespace
}  // namespace tpu::lowering
