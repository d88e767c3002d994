// LDL^T (and LDL^H) with Bunch-Kaufman pivoting, and the solve that uses it: LAPACK's sytf2 /
// hetf2 and sytrs / hetrs (lower storage), so LD and the pivots equal the CPU's. Batched
// [B, n, n] operands; each matrix makes its own 1x1 / 2x2 pivot choices, so the while loops
// carry one step position per matrix. Each step is O(n^2) masked work.
#include <cmath>

#include "lowering/hlo_names.h"
#include "lowering/pivot_search.h"
#include "lowering/pointwise.h"
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;
constexpr ElementType kI64 = ElementType::kI64;
constexpr ElementType kI32 = ElementType::kI32;

// Per-matrix index arithmetic on [B] i64 positions and the [B, n, ...] values they address.
struct Batched {
  Builder& b;
  int64_t batch, n;

  Value i64(int64_t v) { return b.full(TensorType{kI64, {batch}}, static_cast<double>(v)); }
  Value any(Value flags) { return b.reduce(flags, b.constant_int(ElementType::kBool, 0), {0}, ReduceKind::kOr); }
  // [B] -> the shape `dims` (dim 0 = batch)
  Value spread(Value per_matrix, const Dims& dims) { return b.broadcast_in_dim(per_matrix, dims, {0}); }
  // the index along `dim` of every element of a `dims`-shaped value
  Value index(const Dims& dims, int64_t dim) { return b.iota(TensorType{kI64, dims}, dim); }
  Value at(Value x, int64_t dim, Value pos) { return b.compare(index(b.dims(x), dim), spread(pos, b.dims(x)), Compare::kEQ); }
  Value zeros_like(Value x) { return b.full(b.type(x), 0); }
  // x [B, n, ...] summed over `dim` where the index equals pos[b]: the slice at pos.
  Value slice_at(Value x, int64_t dim, Value pos) {
    return b.reduce(b.select(at(x, dim, pos), x, zeros_like(x)), b.constant(b.dtype(x), 0), {dim}, ReduceKind::kSum);
  }
  // Swaps the slices p[b] and q[b] along `dim` where `enable` [B].
  Value swap(Value x, int64_t dim, Value p, Value q, Value enable) {
    const Dims d = b.dims(x);
    Dims keep;  // the slice's dims in x
    for (int64_t i = 0; i < static_cast<int64_t>(d.size()); ++i) if (i != dim) keep.push_back(i);
    Value sp = b.broadcast_in_dim(slice_at(x, dim, p), d, keep), sq = b.broadcast_in_dim(slice_at(x, dim, q), d, keep);
    Value swapped = b.select(at(x, dim, p), sq, b.select(at(x, dim, q), sp, x));
    return b.select(spread(enable, d), swapped, x);
  }
};

// x_i * y_j over [B, n, m] from x [B, n] and y [B, m].
Value outer(Builder& b, Value x, Value y) {
  const Dims d{b.dims(x)[0], b.dims(x)[1], b.dims(y)[1]};
  return b.mul(b.broadcast_in_dim(x, d, {0, 1}), b.broadcast_in_dim(y, d, {0, 2}));
}

// ldl_factor: inputs [A [B, n, n]] (its lower triangle is read); attrs hermitian -> (LD [B, n, n]
// lower, pivots [B, n] i32 as LAPACK's ipiv, info [B] i32).
Args lower_ldl_factor(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims d = b.dims(in[0]);
  const int64_t batch = d[0], n = d[1];
  const ElementType t = b.dtype(in[0]);
  const bool herm = ctx.attrs.get_bool("hermitian") && is_complex(t);
  Batched m{b, batch, n};
  const Dims vd{batch, n};
  Value rows = m.index(d, 1), cols = m.index(d, 2);
  // Full storage of the symmetric (Hermitian) matrix the lower triangle describes.
  Value strict = b.select(b.compare(rows, cols, Compare::kGT), in[0], m.zeros_like(in[0]));
  Value diag_mask = b.compare(rows, cols, Compare::kEQ);
  Value mirrored = b.transpose(strict, {0, 2, 1});
  if (herm) mirrored = conjugate(b, mirrored);
  Value diag = b.select(diag_mask, in[0], m.zeros_like(in[0]));
  if (herm) diag = b.convert(real_part(b, diag), t);
  Value s0 = b.add(b.add(strict, mirrored), diag);
  const double alpha = (1.0 + std::sqrt(17.0)) / 8.0;
  auto diag_size = [&](Value x) { return herm ? b.unary("stablehlo.abs", real_part(b, x)) : pivot_size(b, x); };
  auto conj_if = [&](Value x) { return herm ? conjugate(b, x) : x; };

  auto out = b.while_loop(
      {m.i64(0), s0, b.full(TensorType{kI32, vd}, 0), b.full(TensorType{kI32, {batch}}, 0)},
      [&](const Args& st) { return Args{m.any(b.compare(st[0], m.i64(n), Compare::kLT))}; },
      [&](const Args& st) {
        Value k = st[0], s = st[1], piv = st[2], info = st[3];
        Value active = b.compare(k, m.i64(n), Compare::kLT);
        Value vpos = m.index(vd, 1);
        Value kv = m.spread(k, vd);
        Value diag_v = b.reduce(b.select(diag_mask, s, m.zeros_like(s)), b.constant(t, 0), {2}, ReduceKind::kSum);
        // pivot choice (sytf2's Bunch-Kaufman test)
        Value absakk = diag_size(m.slice_at(diag_v, 1, k));
        Value colk = m.slice_at(s, 2, k);  // [B, n]
        Value col_mag = pivot_size(b, colk);
        Value none = b.full(b.type(col_mag), -1);
        auto [colmax, imax] = first_largest(b, b.select(b.compare(vpos, kv, Compare::kGT), col_mag, none));
        colmax = b.max(colmax, b.full(b.type(colmax), 0));
        imax = b.min(imax, m.i64(n - 1));
        Value zero_col = logical_or(b, b.compare(b.max(absakk, colmax), b.full(b.type(colmax), 0), Compare::kEQ),
                                    is_nan(b, absakk));
        Value rowi = m.slice_at(s, 1, imax);
        Value in_row = logical_and(b, b.compare(vpos, kv, Compare::kGE), b.compare(vpos, m.spread(imax, vd), Compare::kNE));
        Value rowmax = first_largest(b, b.select(in_row, pivot_size(b, rowi), none)).first;
        Value absaii = diag_size(m.slice_at(diag_v, 1, imax));
        auto scaled = [&](Value x, double f) { return b.mul(x, b.full(b.type(x), f)); };
        Value c1 = b.compare(absakk, scaled(colmax, alpha), Compare::kGE);
        Value c2 = b.compare(absakk, b.mul(scaled(colmax, alpha), b.div(colmax, rowmax)), Compare::kGE);
        Value c3 = b.compare(absaii, scaled(rowmax, alpha), Compare::kGE);
        Value keep = logical_or(b, zero_col, logical_or(b, c1, c2));
        Value two = logical_and(b, logical_not(b, keep), logical_not(b, c3));
        Value kp = b.select(keep, k, imax);
        Value kstep = b.select(two, m.i64(2), m.i64(1));
        Value kk = b.sub(b.add(k, kstep), m.i64(1));
        Value work = logical_and(b, active, logical_not(b, zero_col));
        // symmetric interchange of kk and kp inside the trailing block s[k:, k:]
        Value swapped = m.swap(m.swap(s, 1, kk, kp, work), 2, kk, kp, work);
        Value trailing = logical_and(b, b.compare(rows, m.spread(k, d), Compare::kGE), b.compare(cols, m.spread(k, d), Compare::kGE));
        s = b.select(trailing, swapped, s);

        Value k1 = b.min(b.add(k, m.i64(1)), m.i64(n - 1));
        Value x = m.slice_at(s, 2, k), y = m.slice_at(s, 2, k1);  // columns k and k + 1
        Value akk = m.slice_at(x, 1, k);
        auto beyond = [&](Value pos, Value idx) { return b.compare(idx, m.spread(pos, b.dims(idx)), Compare::kGT); };
        auto col_is = [&](Value pos) { return b.compare(cols, m.spread(pos, d), Compare::kEQ); };
        // 1x1 pivot: s -= x x^T / akk below and right of k; column k becomes x / akk.
        Value r1 = herm ? b.convert(b.div(b.full(b.type(real_part(b, akk)), 1), real_part(b, akk)), t)
                        : b.div(b.full(b.type(akk), 1), akk);
        Value x_below = b.select(beyond(k, vpos), x, m.zeros_like(x));
        Value one_update = b.add(s, outer(b, x_below, b.mul(b.neg(m.spread(r1, vd)), conj_if(x_below))));
        Value one_col = b.mul(x_below, m.spread(r1, vd));
        // 2x2 pivot on (k, k + 1): LAPACK's scaled inverse of D applied to columns k and k + 1.
        Value d21 = m.slice_at(x, 1, k1);  // s[k+1, k]
        Value akp1 = m.slice_at(y, 1, k1);
        Value x2 = b.select(beyond(k1, vpos), x, m.zeros_like(x)), y2 = b.select(beyond(k1, vpos), y, m.zeros_like(y));
        Value wk, wkp1, two_update;
        if (herm) {
          Value dd = magnitude(b, d21);
          Value d11 = b.div(real_part(b, akp1), dd), d22 = b.div(real_part(b, akk), dd);
          Value tt = b.div(b.full(b.type(d11), 1), b.sub(b.mul(d11, d22), b.full(b.type(d11), 1)));
          Value unit21 = b.div(d21, b.convert(dd, t));
          Value scale = b.convert(b.div(tt, dd), t);
          wk = b.mul(m.spread(scale, vd), b.sub(b.mul(m.spread(b.convert(d11, t), vd), x2), b.mul(m.spread(unit21, vd), y2)));
          wkp1 = b.mul(m.spread(scale, vd),
                       b.sub(b.mul(m.spread(b.convert(d22, t), vd), y2), b.mul(m.spread(conjugate(b, unit21), vd), x2)));
          two_update = b.sub(s, b.add(outer(b, x2, conjugate(b, wk)), outer(b, y2, conjugate(b, wkp1))));
        } else {
          Value d11 = b.div(akp1, d21), d22 = b.div(akk, d21);
          Value one = b.full(b.type(d11), 1);
          Value tt = b.div(one, b.sub(b.mul(d11, d22), one));
          Value scale = b.div(tt, d21);
          wk = b.mul(m.spread(scale, vd), b.sub(b.mul(m.spread(d11, vd), x2), y2));
          wkp1 = b.mul(m.spread(scale, vd), b.sub(b.mul(m.spread(d22, vd), y2), x2));
          two_update = b.sub(s, b.add(outer(b, x2, wk), outer(b, y2, wkp1)));
        }
        Value is_one = logical_and(b, work, logical_not(b, two)), is_two = logical_and(b, work, two);
        Value block1 = logical_and(b, beyond(k, rows), beyond(k, cols));
        s = b.select(logical_and(b, m.spread(is_one, d), block1), one_update, s);
        s = b.select(logical_and(b, m.spread(is_one, d), logical_and(b, beyond(k, rows), col_is(k))),
                     b.broadcast_in_dim(one_col, d, {0, 1}), s);
        Value block2 = logical_and(b, beyond(k1, rows), beyond(k1, cols));
        s = b.select(logical_and(b, m.spread(is_two, d), block2), two_update, s);
        s = b.select(logical_and(b, m.spread(is_two, d), logical_and(b, beyond(k1, rows), col_is(k))),
                     b.broadcast_in_dim(wk, d, {0, 1}), s);
        s = b.select(logical_and(b, m.spread(is_two, d), logical_and(b, beyond(k1, rows), col_is(k1))),
                     b.broadcast_in_dim(wkp1, d, {0, 1}), s);
        if (herm) s = b.select(diag_mask, b.convert(real_part(b, s), t), s);
        // ipiv: kp + 1, or -(kp + 1) on both rows of a 2x2 block
        Value code = b.convert(b.add(kp, m.i64(1)), kI32);
        code = b.select(two, b.neg(code), code);
        Value here = logical_and(b, m.spread(active, vd),
                                 logical_or(b, b.compare(vpos, kv, Compare::kEQ),
                                            logical_and(b, m.spread(is_two, vd), b.compare(vpos, m.spread(b.add(k, m.i64(1)), vd), Compare::kEQ))));
        piv = b.select(here, m.spread(code, vd), piv);
        Value first_zero = logical_and(b, logical_and(b, active, zero_col), b.compare(info, b.full(b.type(info), 0), Compare::kEQ));
        info = b.select(first_zero, b.convert(b.add(k, m.i64(1)), kI32), info);
        return Args{b.select(active, b.add(k, kstep), k), s, piv, info};
      });
  Value ld = b.select(b.compare(rows, cols, Compare::kGE), out[1], m.zeros_like(out[1]));
  return {ld, out[2], out[3]};
}

// ldl_solve: inputs [LD [B, n, n], pivots [B, n] i32, X [B, n, r]]; attrs hermitian -> the
// solution of A X = B for the A that ldl_factor factored (sytrs: L D solve, then L^T).
Args lower_ldl_solve(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims ld_dims = b.dims(in[0]), xd = b.dims(in[2]);
  const int64_t batch = ld_dims[0], n = ld_dims[1];
  const ElementType t = b.dtype(in[0]);
  const bool herm = ctx.attrs.get_bool("hermitian") && is_complex(t);
  Batched m{b, batch, n};
  const Dims vd{batch, n};
  Value ld = in[0];
  Value pv = b.convert(in[1], kI64);
  Value vpos = m.index(vd, 1);
  auto conj_if = [&](Value x) { return herm ? conjugate(b, x) : x; };
  auto below = [&](Value pos) { return b.compare(vpos, m.spread(pos, vd), Compare::kGT); };
  auto masked = [&](Value v, Value keep) { return b.select(keep, v, m.zeros_like(v)); };
  auto row_set = [&](Value x, Value pos, Value value, Value enable) {  // x[pos] = value where enable
    return b.select(logical_and(b, m.at(x, 1, pos), m.spread(enable, b.dims(x))), b.broadcast_in_dim(value, b.dims(x), {0, 2}), x);
  };
  auto update = [&](Value x, Value col, Value row, Value enable) {  // x -= col_i * row where enable
    return b.select(m.spread(enable, b.dims(x)), b.sub(x, outer(b, col, row)), x);
  };
  // forward: L D y = P b, one block at a time from the top
  auto fwd = b.while_loop(
      {m.i64(0), in[2]},
      [&](const Args& st) { return Args{m.any(b.compare(st[0], m.i64(n), Compare::kLT))}; },
      [&](const Args& st) {
        Value k = st[0], x = st[1];
        Value active = b.compare(k, m.i64(n), Compare::kLT);
        Value kc = b.min(k, m.i64(n - 1)), k1 = b.min(b.add(k, m.i64(1)), m.i64(n - 1));
        Value p = m.slice_at(pv, 1, kc);
        Value one = b.compare(p, m.i64(0), Compare::kGT), two = logical_and(b, active, logical_not(b, one));
        one = logical_and(b, active, one);
        Value kp = b.select(one, b.sub(p, m.i64(1)), b.sub(b.neg(p), m.i64(1)));
        x = m.swap(x, 1, b.select(one, kc, k1), kp, active);
        Value lk = m.slice_at(ld, 2, kc), lk1 = m.slice_at(ld, 2, k1);
        Value xk = m.slice_at(x, 1, kc), xk1 = m.slice_at(x, 1, k1);
        x = update(x, masked(lk, below(kc)), xk, one);
        x = update(x, masked(lk, below(k1)), xk, two);
        x = update(x, masked(lk1, below(k1)), xk1, two);
        Value dk = m.slice_at(lk, 1, kc);
        if (herm) dk = b.convert(real_part(b, dk), t);
        x = row_set(x, kc, b.div(xk, b.broadcast_in_dim(dk, {batch, xd[2]}, {0})), one);
        // 2x2 block [[a, conj(c)], [c, e]] (symmetric: [[a, c], [c, e]])
        Value c = m.slice_at(lk, 1, k1), e = m.slice_at(lk1, 1, k1);
        Value c_up = conj_if(c);
        Value a_s = b.div(dk, c_up), e_s = b.div(e, c);
        Value denom = b.sub(b.mul(a_s, e_s), b.full(b.type(a_s), 1));
        auto per_row = [&](Value v) { return b.broadcast_in_dim(v, {batch, xd[2]}, {0}); };
        Value bkm1 = b.div(xk, per_row(c_up)), bk = b.div(xk1, per_row(c));
        x = row_set(x, kc, b.div(b.sub(b.mul(per_row(e_s), bkm1), bk), per_row(denom)), two);
        x = row_set(x, k1, b.div(b.sub(b.mul(per_row(a_s), bk), bkm1), per_row(denom)), two);
        return Args{b.select(active, b.add(k, b.select(one, m.i64(1), m.i64(2))), k), x};
      });
  // backward: L^T x = y (L^H for Hermitian), one block at a time from the bottom
  auto bwd = b.while_loop(
      {m.i64(n - 1), fwd[1]},
      [&](const Args& st) { return Args{m.any(b.compare(st[0], m.i64(0), Compare::kGE))}; },
      [&](const Args& st) {
        Value k = st[0], x = st[1];
        Value active = b.compare(k, m.i64(0), Compare::kGE);
        Value kc = b.max(k, m.i64(0)), km1 = b.max(b.sub(k, m.i64(1)), m.i64(0));
        Value p = m.slice_at(pv, 1, kc);
        Value one = b.compare(p, m.i64(0), Compare::kGT), two = logical_and(b, active, logical_not(b, one));
        one = logical_and(b, active, one);
        Value lk = masked(conj_if(m.slice_at(ld, 2, kc)), below(kc));
        Value lkm1 = masked(conj_if(m.slice_at(ld, 2, km1)), below(kc));
        auto dot_rows = [&](Value col) {  // sum_i col_i x[i, :]
          return b.reduce(b.mul(b.broadcast_in_dim(col, b.dims(x), {0, 1}), x), b.constant(t, 0), {1}, ReduceKind::kSum);
        };
        Value xk = m.slice_at(x, 1, kc), xkm1 = m.slice_at(x, 1, km1);
        Value new_k = b.sub(xk, dot_rows(lk)), new_km1 = b.sub(xkm1, dot_rows(lkm1));
        x = row_set(x, kc, new_k, active);
        x = row_set(x, km1, new_km1, two);
        Value kp = b.select(one, b.sub(p, m.i64(1)), b.sub(b.neg(p), m.i64(1)));
        x = m.swap(x, 1, kc, kp, active);
        return Args{b.select(active, b.sub(k, b.select(one, m.i64(1), m.i64(2))), k), x};
      });
  return {bwd[1]};
}

const LoweringEntry kLdl[] = {{"ldl_factor", lower_ldl_factor}, {"ldl_solve", lower_ldl_solve}};
TPU_REGISTER_LOWERINGS(kLdl);

}  // namespace
}  // namespace tpu::lowering
