// Matrix factorizations and solves on batched [B, m, n] operands: Cholesky and triangular solve
// (StableHLO's own ops), LU with partial pivoting (LAPACK's getf2 as a while loop over columns:
// O(n^2) work per step), and the row-swap sequence a pivot vector describes.
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

Value zeros(Builder& b, Value like) { return b.full(b.type(like), 0); }

// Lower (or upper) triangle of the trailing two dims, the rest zero; `offset` as in tril/triu.
Value triangle(Builder& b, Value x, bool lower, int64_t offset = 0) {
  const Dims d = b.dims(x);
  const int64_t r = static_cast<int64_t>(d.size());
  const TensorType it{kI64, d};
  Value shifted = b.add(b.iota(it, r - 2), b.full(it, static_cast<double>(offset)));  // row + offset
  Value keep = b.compare(b.iota(it, r - 1), shifted, lower ? Compare::kLE : Compare::kGE);
  return b.select(keep, x, zeros(b, x));
}

// The k-th diagonal element of every matrix: [B, m, n] -> [B].
Value diagonal_at(Builder& b, Value a, Value k) {
  const Dims d = b.dims(a);
  const TensorType it{kI64, d};
  Value kk = b.broadcast_in_dim(k, d, {});
  Value at = b.binary("stablehlo.and", b.compare(b.iota(it, 1), kk, Compare::kEQ), b.compare(b.iota(it, 2), kk, Compare::kEQ));
  return b.reduce(b.select(at, a, zeros(b, a)), b.constant(b.dtype(a), 0), {1, 2}, ReduceKind::kSum);
}

// Row `rows[b]` of every matrix: [B, m, n], [B] i64 -> [B, n].
Value row_of(Builder& b, Value a, Value rows) {
  const Dims d = b.dims(a);
  Value hit = b.compare(b.iota(TensorType{kI64, d}, 1), b.broadcast_in_dim(rows, d, {0}), Compare::kEQ);
  return b.reduce(b.select(hit, a, zeros(b, a)), b.constant(b.dtype(a), 0), {1}, ReduceKind::kSum);
}

// Swaps rows k (scalar) and p[b] of every matrix.
Value swap_rows(Builder& b, Value a, Value k, Value p) {
  const Dims d = b.dims(a);
  Value kb = b.broadcast_in_dim(k, {d[0]}, {});
  Value row_k = row_of(b, a, kb), row_p = row_of(b, a, p);
  Value rows = b.iota(TensorType{kI64, d}, 1);
  Value at_k = b.compare(rows, b.broadcast_in_dim(k, d, {}), Compare::kEQ);
  Value at_p = b.compare(rows, b.broadcast_in_dim(p, d, {0}), Compare::kEQ);
  return b.select(at_k, b.broadcast_in_dim(row_p, d, {0, 2}), b.select(at_p, b.broadcast_in_dim(row_k, d, {0, 2}), a));
}

// LAPACK's Cholesky info for every matrix: 0, or the order of the first leading minor that is
// not positive definite - the first pivot <= 0 (or NaN) of Gaussian elimination without
// pivoting, whose pivots are the squares of the Cholesky diagonal.
Value cholesky_info(Builder& b, Value a) {
  const Dims d = b.dims(a);
  const int64_t batch = d[0], n = d[1];
  const ElementType t = b.dtype(a);
  auto out = b.while_loop(
      {b.constant_int(kI64, 0), a, b.full(TensorType{kI32, {batch}}, 0)},
      [&](const Args& s) { return Args{b.compare(s[0], b.constant_int(kI64, n), Compare::kLT)}; },
      [&](const Args& s) {
        Value k = s[0], m = s[1], info = s[2];
        const TensorType it{kI64, d};
        Value rows = b.iota(it, 1), cols = b.iota(it, 2), kk = b.broadcast_in_dim(k, d, {});
        Value pivot = diagonal_at(b, m, k);
        Value row_k = row_of(b, m, b.broadcast_in_dim(k, {batch}, {}));
        Value col_k = b.reduce(b.select(b.compare(cols, kk, Compare::kEQ), m, zeros(b, m)), b.constant(t, 0), {2},
                               ReduceKind::kSum);
        Value l = b.div(col_k, b.broadcast_in_dim(pivot, {batch, n}, {0}));
        Value update = b.binary("stablehlo.and", b.compare(rows, kk, Compare::kGT), b.compare(cols, kk, Compare::kGT));
        m = b.select(update, b.sub(m, b.mul(b.broadcast_in_dim(l, d, {0, 1}), b.broadcast_in_dim(row_k, d, {0, 2}))), m);
        Value real_pivot = real_part(b, pivot);  // a Hermitian matrix's diagonal is real
        Value fails = b.binary("stablehlo.and", b.unary("stablehlo.not", b.compare(real_pivot, zeros(b, real_pivot), Compare::kGT)),
                               b.compare(info, zeros(b, info), Compare::kEQ));
        info = b.select(fails, b.broadcast_in_dim(b.convert(b.add(k, b.constant_int(kI64, 1)), kI32), {batch}, {}), info);
        return Args{b.add(k, b.constant_int(kI64, 1)), m, info};
      });
  return out[2];
}

// cholesky: inputs [A [B, n, n]]; attrs upper -> (factor, info [B] i32). The factor comes from
// StableHLO's cholesky; only when some factor is not finite does the program run the
// elimination that finds LAPACK's info.
Args lower_cholesky(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims d = b.dims(in[0]);
  const bool upper = ctx.attrs.get_bool("upper");
  Value l = triangle(b, b.emit("stablehlo.cholesky", {in[0]}, b.type(in[0]), "lower = true"), true);
  Value finite = is_finite(b, l);
  Value failed = b.reduce(b.unary("stablehlo.not", finite), b.constant(ElementType::kBool, 0), {0, 1, 2}, ReduceKind::kOr);
  const TensorType info_type{kI32, {d[0]}};
  Value info = b.if_else(
      failed, {info_type}, [&](const Args&) { return Args{cholesky_info(b, in[0])}; },
      [&](const Args&) { return Args{b.full(info_type, 0)}; })[0];
  if (upper) l = conjugate(b, b.transpose(l, {0, 2, 1}));  // A = U^H U
  return {l, info};
}

// triangular_solve: inputs [A [B, n, n], rhs [B, n, k] (left) or [B, k, n]]; attrs left,
// lower, unit, transpose, conjugate -> X with op(A) X = rhs (left) or X op(A) = rhs; op(A) is
// A, its transpose, or (conjugate) its adjoint.
Args lower_triangular_solve(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const auto& a = ctx.attrs;
  const std::string attrs = std::string("left_side = ") + (a.get_bool("left") ? "true" : "false") +
                            ", lower = " + (a.get_bool("lower") ? "true" : "false") +
                            ", unit_diagonal = " + (a.get_bool("unit") ? "true" : "false") +
                            ", transpose_a = #stablehlo<transpose " +
                            (!a.get_bool("transpose") ? "NO_TRANSPOSE" : a.get_bool("conjugate", false) ? "ADJOINT" : "TRANSPOSE") +
                            ">";
  return {b.emit("stablehlo.triangular_solve", {in[0], in[1]}, b.type(in[1]), attrs)};
}

// lu_factor: inputs [A [B, m, n]] -> (LU packed [B, m, n], pivots [B, min(m, n)] i32 1-based,
// info [B] i32: 0, or the 1-based index of the first exactly-zero pivot).
Args lower_lu_factor(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims d = b.dims(in[0]);
  const int64_t batch = d[0], m = d[1], n = d[2], steps = std::min(m, n);
  const ElementType t = b.dtype(in[0]);
  Value k0 = b.constant_int(kI64, 0);
  Value piv0 = b.full(TensorType{kI32, {batch, steps}}, 0);
  Value info0 = b.full(TensorType{kI32, {batch}}, 0);
  auto out = b.while_loop(
      {k0, in[0], piv0, info0},
      [&](const Args& s) { return Args{b.compare(s[0], b.constant_int(kI64, steps), Compare::kLT)}; },
      [&](const Args& s) {
        Value k = s[0], a = s[1], piv = s[2], info = s[3];
        const TensorType it{kI64, d};
        Value rows = b.iota(it, 1), cols = b.iota(it, 2);
        Value kk = b.broadcast_in_dim(k, d, {});
        // pivot row: the largest |a[i, k]| for i >= k (first one on ties)
        Value col = b.reduce(b.select(b.compare(cols, kk, Compare::kEQ), a, zeros(b, a)), b.constant(t, 0), {2},
                             ReduceKind::kSum);  // [B, m]
        const TensorType ct{kI64, {batch, m}};
        Value below = b.compare(b.iota(ct, 1), b.broadcast_in_dim(k, {batch, m}, {}), Compare::kGE);
        Value size = pivot_size(b, col);
        Value mag = b.select(below, size, b.full(b.type(size), -1));
        Value p = first_largest(b, mag).second;  // [B]
        a = swap_rows(b, a, k, p);
        Value pivot = diagonal_at(b, a, k);  // [B]
        Value row_k = row_of(b, a, b.broadcast_in_dim(k, {batch}, {}));  // [B, n]
        Value col_k = b.reduce(b.select(b.compare(cols, kk, Compare::kEQ), a, zeros(b, a)), b.constant(t, 0), {2},
                               ReduceKind::kSum);  // [B, m]
        Value nonzero = b.compare(pivot, b.full(b.type(pivot), 0), Compare::kNE);
        Value l = b.select(b.broadcast_in_dim(nonzero, {batch, m}, {0}),
                           b.div(col_k, b.broadcast_in_dim(pivot, {batch, m}, {0})), col_k);
        Value lower_rows = b.compare(rows, kk, Compare::kGT);
        Value update = b.binary("stablehlo.and", lower_rows, b.compare(cols, kk, Compare::kGT));
        Value rank1 = b.mul(b.broadcast_in_dim(l, d, {0, 1}), b.broadcast_in_dim(row_k, d, {0, 2}));
        a = b.select(update, b.sub(a, rank1), a);
        a = b.select(b.binary("stablehlo.and", lower_rows, b.compare(cols, kk, Compare::kEQ)), b.broadcast_in_dim(l, d, {0, 1}), a);
        const TensorType pt{kI32, {batch, steps}};
        Value here = b.compare(b.iota(TensorType{kI64, {batch, steps}}, 1), b.broadcast_in_dim(k, {batch, steps}, {}), Compare::kEQ);
        piv = b.select(here, b.broadcast_in_dim(b.convert(b.add(p, b.full(b.type(p), 1)), kI32), pt.dims, {0}), piv);
        Value first_zero = b.binary("stablehlo.and", b.unary("stablehlo.not", nonzero), b.compare(info, zeros(b, info), Compare::kEQ));
        info = b.select(first_zero, b.broadcast_in_dim(b.convert(b.add(k, b.constant_int(kI64, 1)), kI32), {batch}, {}), info);
        return Args{b.add(k, b.constant_int(kI64, 1)), a, piv, info};
      });
  return {out[1], out[2], out[3]};
}

// apply_pivots: inputs [X [B, m, k], pivots [B, s] i32 1-based]; attrs reverse -> X with rows
// i and pivots[i] - 1 swapped for i = 0..s-1 (in reverse order when `reverse`): P^T X, or P X.
Args lower_apply_pivots(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims pd = b.dims(in[1]);
  const int64_t steps = pd[1];
  const bool reverse = ctx.attrs.get_bool("reverse");
  Value pivots = b.sub(b.convert(in[1], kI64), b.full(TensorType{kI64, pd}, 1));
  auto out = b.while_loop(
      {b.constant_int(kI64, 0), in[0]},
      [&](const Args& s) { return Args{b.compare(s[0], b.constant_int(kI64, steps), Compare::kLT)}; },
      [&](const Args& s) {
        Value i = reverse ? b.sub(b.constant_int(kI64, steps - 1), s[0]) : s[0];
        Value here = b.compare(b.iota(TensorType{kI64, pd}, 1), b.broadcast_in_dim(i, pd, {}), Compare::kEQ);
        Value p = b.reduce(b.select(here, pivots, b.full(b.type(pivots), 0)), b.constant_int(kI64, 0), {1}, ReduceKind::kSum);
        return Args{b.add(s[0], b.constant_int(kI64, 1)), swap_rows(b, s[1], i, p)};
      });
  return {out[1]};
}

// lu_unpack helpers: inputs [LU [B, m, n]] -> (L [B, m, k] unit lower, U [B, k, n] upper).
Args lower_lu_split(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims d = b.dims(in[0]);
  const int64_t k = std::min(d[1], d[2]);
  Value l = b.slice(in[0], {0, 0, 0}, {d[0], d[1], k}, {1, 1, 1});
  Value u = b.slice(in[0], {0, 0, 0}, {d[0], k, d[2]}, {1, 1, 1});
  l = triangle(b, l, true, -1);
  const TensorType it{kI64, b.dims(l)};
  l = b.add(l, b.convert(b.compare(b.iota(it, 1), b.iota(it, 2), Compare::kEQ), b.dtype(l)));
  return {l, triangle(b, u, false)};
}

// lu_det: inputs [LU [B, n, n], pivots [B, n] i32] -> (sign [B] (+-1, 0 when singular),
// log|det| [B], det [B]).
Args lower_lu_det(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims d = b.dims(in[0]);
  const TensorType it{kI64, d};
  Value diag_mask = b.compare(b.iota(it, 1), b.iota(it, 2), Compare::kEQ);
  Value diag = b.reduce(b.select(diag_mask, in[0], zeros(b, in[0])), b.constant(b.dtype(in[0]), 0), {2}, ReduceKind::kSum);
  const Dims pd = b.dims(in[1]);
  Value moved = b.compare(b.convert(in[1], kI64), b.add(b.iota(TensorType{kI64, pd}, 1), b.full(TensorType{kI64, pd}, 1)),
                          Compare::kNE);
  Value swaps = b.reduce(b.convert(moved, kI64), b.constant_int(kI64, 0), {1}, ReduceKind::kSum);
  Value odd = b.compare(b.binary("stablehlo.remainder", swaps, b.full(b.type(swaps), 2)), b.full(b.type(swaps), 1), Compare::kEQ);
  Value perm_sign = b.select(odd, b.full(TensorType{b.dtype(diag), {d[0]}}, -1), b.full(TensorType{b.dtype(diag), {d[0]}}, 1));
  Value singular = b.reduce(b.compare(diag, zeros(b, diag), Compare::kEQ), b.constant(ElementType::kBool, 0), {1}, ReduceKind::kOr);
  Value size = magnitude(b, diag);  // real
  Value logabs = b.reduce(b.unary("stablehlo.log", size), b.constant(b.dtype(size), 0), {1}, ReduceKind::kSum);
  Value det = b.mul(perm_sign, b.reduce(diag, b.constant(b.dtype(diag), 1), {1}, ReduceKind::kProd));
  if (is_complex(b.dtype(diag))) {  // sign: the unit-modulus factor det / |det|
    Value unit = b.div(diag, b.convert(b.select(b.compare(size, zeros(b, size), Compare::kEQ), b.full(b.type(size), 1), size),
                                       b.dtype(diag)));
    Value sign = b.mul(perm_sign, b.reduce(unit, b.constant(b.dtype(diag), 1), {1}, ReduceKind::kProd));
    return {b.select(singular, zeros(b, sign), sign), logabs, det};
  }
  Value negatives = b.reduce(b.convert(b.compare(diag, zeros(b, diag), Compare::kLT), kI64), b.constant_int(kI64, 0), {1},
                             ReduceKind::kSum);
  Value neg_odd = b.compare(b.binary("stablehlo.remainder", negatives, b.full(b.type(negatives), 2)), b.full(b.type(negatives), 1),
                            Compare::kEQ);
  Value sign = b.select(neg_odd, b.neg(perm_sign), perm_sign);
  return {b.select(singular, zeros(b, sign), sign), logabs, det};
}

// eigh: inputs [A [B, n, n]]; attrs lower -> (eigenvalues [B, n] ascending, eigenvectors
// [B, n, n] as columns). XLA expands the "Eigh" custom call into a Jacobi iteration.
Args lower_eigh(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims d = b.dims(in[0]);
  const ElementType t = b.dtype(in[0]);  // complex Hermitian input: real eigenvalues
  const std::string config = std::string("call_target_name = \"Eigh\", backend_config = \"") +
                             (ctx.attrs.get_bool("lower") ? "1" : "0") + ",1,100," +
                             (complex_part(t) == ElementType::kF64 ? "1e-15" : "1e-7") + "\", api_version = 1 : i32";
  auto r = b.emit_multi("stablehlo.custom_call", {in[0]}, {b.type(in[0]), TensorType{complex_part(t), {d[0], d[1]}}}, config);
  return {r[1], r[0]};
}

// eig: inputs [A [B, n, n]] (real or complex); attrs vectors -> (eigenvalues [B, n], and with
// vectors the eigenvectors [B, n, n] as columns), complex of A's precision. StableHLO has no
// general eig: the host kernel torch_tpu_eig (host_kernels/eig.h) computes it on plugins that
// register it; the aten kernel sends other plugins' calls to the CPU.
Args lower_eig(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims d = b.dims(in[0]);
  const ElementType c = complex_part(b.dtype(in[0])) == ElementType::kF64 ? ElementType::kC128 : ElementType::kC64;
  const bool vectors = ctx.attrs.get_bool("vectors");
  std::vector<TensorType> types = {TensorType{c, {d[0], d[1]}}};
  if (vectors) types.push_back(TensorType{c, d});
  const std::string config = std::string("call_target_name = \"torch_tpu_eig\", api_version = 4 : i32, "
                                         "backend_config = {vectors = ") + (vectors ? "1" : "0") + " : i64}";
  return b.emit_multi("stablehlo.custom_call", {in[0]}, types, config);
}

// qr (geqrf): inputs [A [B, m, n]] -> (packed Householder vectors and R [B, m, n], taus
// [B, min(m, n)]), LAPACK's layout; XLA expands the "Qr" custom call.
Args lower_geqrf(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims d = b.dims(in[0]);
  auto r = b.emit_multi("stablehlo.custom_call", {in[0]},
                        {b.type(in[0]), TensorType{b.dtype(in[0]), {d[0], std::min(d[1], d[2])}}},
                        "call_target_name = \"Qr\", api_version = 1 : i32");
  return {r[0], r[1]};
}

// householder_product: inputs [A [B, m, n], taus [B, k]] -> Q [B, m, n].
Args lower_householder_product(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  return {b.emit("stablehlo.custom_call", {in[0], in[1]}, b.type(in[0]),
                 "call_target_name = \"ProductOfElementaryHouseholderReflectors\", api_version = 1 : i32")};
}

TPU_REGISTER_LOWERING("eigh", lower_eigh);
TPU_REGISTER_LOWERING("eig", lower_eig);
TPU_REGISTER_LOWERING("geqrf", lower_geqrf);
TPU_REGISTER_LOWERING("householder_product", lower_householder_product);
TPU_REGISTER_LOWERING("cholesky", lower_cholesky);
TPU_REGISTER_LOWERING("triangular_solve", lower_triangular_solve);
TPU_REGISTER_LOWERING("lu_factor", lower_lu_factor);
TPU_REGISTER_LOWERING("apply_pivots", lower_apply_pivots);
TPU_REGISTER_LOWERING("lu_split", lower_lu_split);
TPU_REGISTER_LOWERING("lu_det", lower_lu_det);

}  // namespace
}  // namespace tpu::lowering
