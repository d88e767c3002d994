// Factorizations and solvers: Cholesky, triangular solves, LU (factor, unpack, solve), and
// what is built from them - solve, inv, det, slogdet, cholesky_solve, cholesky_inverse.
// Batch dimensions are broadcast and flattened here; the lowerings (lowering/linalg_factor.cc)
// see [B, m, n] operands.
#include <ATen/ExpandUtils.h>
#include <ATen/ops/_linalg_check_errors.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "aten/complex_support.h"
#include "aten/linalg_common.h"
#include "aten/op_runner.h"
#include "aten/out_variants.h"

namespace tpu::aten {
namespace {

// ---- Cholesky ------------------------------------------------------------------------------

std::pair<at::Tensor, at::Tensor> cholesky(const at::Tensor& a, bool upper, const char* api) {
  check_float_or_complex_matrix(a, api);
  check_square(a, api);
  const Dims batch = batch_dims(a);
  if (a.numel() == 0) return {at::empty(a.sizes(), a.options()), at::zeros(batch, a.options().dtype(at::kInt))};
  OpRunner r("cholesky", api);
  r.input(as3d(a, batch));
  r.attrs().set_bool("upper", upper);
  auto out = r.run(2);
  return {unflatten(out[0], batch), out[1].reshape(batch)};
}

std::tuple<at::Tensor&, at::Tensor&> k_cholesky_ex_out(const at::Tensor& a, bool upper, bool check_errors, at::Tensor& l,
                                                       at::Tensor& info) {
  auto [factor, inf] = cholesky(a, upper, "linalg.cholesky");
  write_out(factor, l);
  write_out(inf, info);
  if (check_errors) at::_linalg_check_errors(info, "linalg.cholesky_ex", a.dim() == 2);
  return {l, info};
}

// The deprecated aten::cholesky: the same factor, errors always checked.
at::Tensor k_cholesky(const at::Tensor& a, bool upper) {
  auto [factor, info] = cholesky(a, upper, "cholesky");
  at::_linalg_check_errors(info, "cholesky", a.dim() == 2);
  return factor;
}
at::Tensor& k_cholesky_out(const at::Tensor& a, bool upper, at::Tensor& out) {
  return write_out(k_cholesky(a, upper), out);
}
void k_cholesky_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const at::Tensor a = torch::jit::peek(*stack, 0, 2).toTensor();
  const bool upper = torch::jit::peek(*stack, 1, 2).toBool();
  at::Tensor factor = k_cholesky(a, upper);
  torch::jit::drop(*stack, 2);
  stack->emplace_back(std::move(factor));
}

// ---- triangular solves -----------------------------------------------------------------------

// op(A) X = B (left) or X op(A) = B, batch dims broadcast; op is A's transpose when
// `transpose`, conjugated too when `conjugate` (the adjoint; the same for real A).
at::Tensor tri_solve(const at::Tensor& a, const at::Tensor& b, bool lower, bool left, bool unit, bool transpose,
                     const char* api, bool conjugate = true) {
  check_float_or_complex_matrix(a, api);
  check_square(a, api);
  TORCH_CHECK(b.dim() >= 2, api, ": The input tensor B must have at least 2 dimensions.");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), api, ": Expected A and B to have the same dtype, but found A of type ",
              a.scalar_type(), " and B of type ", b.scalar_type(), " instead.");
  const int64_t n = a.size(-1);
  TORCH_CHECK((left ? b.size(-2) : b.size(-1)) == n, api, ": Incompatible shapes of A and B for the equation ",
              left ? "AX = B" : "XA = B", " (", a.size(-2), "x", a.size(-1), " and ", b.size(-2), "x", b.size(-1), ")");
  const Dims batch = at::infer_size(batch_dims(a), batch_dims(b));
  Dims out_shape = batch;
  out_shape.push_back(b.size(-2));
  out_shape.push_back(b.size(-1));
  if (numel_of(out_shape) == 0) return at::empty(out_shape, b.options());
  OpRunner r("triangular_solve", api);
  r.input(as3d(a, batch)).input(as3d(b, batch));
  r.attrs().set_bool("left", left).set_bool("lower", lower).set_bool("unit", unit).set_bool("transpose", transpose);
  r.attrs().set_bool("conjugate", transpose && conjugate && a.is_complex());
  return r.run1().reshape(out_shape);
}

at::Tensor k_solve_triangular(const at::Tensor& a, const at::Tensor& b, bool upper, bool left, bool unitriangular) {
  return tri_solve(a, b, !upper, left, unitriangular, false, "linalg.solve_triangular");
}
at::Tensor& k_solve_triangular_out(const at::Tensor& a, const at::Tensor& b, bool upper, bool left, bool unitriangular,
                                   at::Tensor& out) {
  return write_out(k_solve_triangular(a, b, upper, left, unitriangular), out);
}

std::tuple<at::Tensor&, at::Tensor&> k_triangular_solve_out(const at::Tensor& b, const at::Tensor& a, bool upper,
                                                            bool transpose, bool unitriangular, at::Tensor& x,
                                                            at::Tensor& m) {
  write_out(tri_solve(a, b, !upper, true, unitriangular, transpose, "triangular_solve", /*conjugate=*/false), x);
  const Dims batch = at::infer_size(batch_dims(a), batch_dims(b));
  Dims a_shape = batch;
  a_shape.push_back(a.size(-2));
  a_shape.push_back(a.size(-1));
  write_out(a.expand(a_shape).clone(at::MemoryFormat::Contiguous), m);
  return {x, m};
}

// ---- LU ---------------------------------------------------------------------------------------

struct Lu {
  at::Tensor lu, pivots, info;
};

Lu lu_factor(const at::Tensor& a, const char* api) {
  check_float_or_complex_matrix(a, api);
  const Dims batch = batch_dims(a);
  const int64_t k = std::min(a.size(-2), a.size(-1));
  Dims piv_shape = batch;
  piv_shape.push_back(k);
  if (a.numel() == 0) {
    return {at::empty(a.sizes(), a.options()), at::empty(piv_shape, a.options().dtype(at::kInt)),
            at::zeros(batch, a.options().dtype(at::kInt))};
  }
  OpRunner r("lu_factor", api);
  r.input(as3d(a, batch));
  auto out = r.run(3);
  return {unflatten(out[0], batch), out[1].reshape(piv_shape), out[2].reshape(batch)};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> k_lu_factor_ex_out(const at::Tensor& a, bool pivot, bool check_errors,
                                                                     at::Tensor& lu, at::Tensor& pivots, at::Tensor& info) {
  TORCH_CHECK(pivot, "linalg.lu_factor: LU without pivoting is not implemented on tpu. Fix: use pivot=True.");
  Lu f = lu_factor(a, "linalg.lu_factor");
  write_out(f.lu, lu);
  write_out(f.pivots, pivots);
  write_out(f.info, info);
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.lu_factor_ex", a.dim() == 2);
  return {lu, pivots, info};
}

// Rows of x ([.., m, k]) permuted by the pivots' swaps: P^T x (forward) or P x (reverse).
at::Tensor apply_pivots(const at::Tensor& x, const at::Tensor& pivots, bool reverse, const Dims& batch) {
  if (x.numel() == 0 || pivots.size(-1) == 0) return x;
  OpRunner r("apply_pivots", "aten::linalg_lu_solve");
  Dims piv_batch = batch;
  piv_batch.push_back(pivots.size(-1));
  r.input(as3d(x, batch)).input(pivots.expand(piv_batch).reshape({numel_of(batch), pivots.size(-1)}), at::kInt);
  r.attrs().set_bool("reverse", reverse);
  return unflatten(r.run1(), batch);
}

// The permutation matrices P of A = P L U, [.., m, m].
at::Tensor permutation_matrix(const at::Tensor& pivots, int64_t m, const at::TensorOptions& opts) {
  Dims batch(pivots.sizes().begin(), pivots.sizes().end() - 1);
  Dims full = batch;
  full.push_back(m);
  full.push_back(m);
  at::Tensor eye = at::eye(m, opts).expand(full);
  return apply_pivots(eye, pivots, false, batch).mT();
}

std::pair<at::Tensor, at::Tensor> lu_split(const at::Tensor& lu) {
  const Dims batch = batch_dims(lu);
  const int64_t m = lu.size(-2), n = lu.size(-1), k = std::min(m, n);
  if (lu.numel() == 0) {
    Dims ls = batch, us = batch;
    ls.insert(ls.end(), {m, k});
    us.insert(us.end(), {k, n});
    return {at::zeros(ls, lu.options()), at::zeros(us, lu.options())};
  }
  OpRunner r("lu_split", "aten::linalg_lu");
  r.input(as3d(lu, batch));
  auto out = r.run(2);
  return {unflatten(out[0], batch), unflatten(out[1], batch)};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> k_lu_out(const at::Tensor& a, bool pivot, at::Tensor& p, at::Tensor& l,
                                                           at::Tensor& u) {
  TORCH_CHECK(pivot, "linalg.lu: LU without pivoting is not implemented on tpu. Fix: use pivot=True.");
  Lu f = lu_factor(a, "linalg.lu");
  auto [lo, up] = lu_split(f.lu);
  write_out(permutation_matrix(f.pivots, a.size(-2), a.options()), p);
  write_out(lo, l);
  write_out(up, u);
  return {p, l, u};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> k_lu_unpack_out(const at::Tensor& lu, const at::Tensor& pivots,
                                                                  bool unpack_data, bool unpack_pivots, at::Tensor& p,
                                                                  at::Tensor& l, at::Tensor& u) {
  if (unpack_data) {
    auto [lo, up] = lu_split(lu);
    write_out(lo, l);
    write_out(up, u);
  }
  if (unpack_pivots) write_out(permutation_matrix(pivots, lu.size(-2), lu.options()), p);
  return {p, l, u};
}

// Solves A X = B (or A^H X = B) for A = P L U given packed LU: B is [.., n, k].
at::Tensor lu_solve_left(const at::Tensor& lu, const at::Tensor& pivots, const at::Tensor& b, bool adjoint) {
  const Dims batch = at::infer_size(batch_dims(lu), batch_dims(b));
  if (!adjoint) {
    at::Tensor y = apply_pivots(b, pivots, false, batch);
    y = tri_solve(lu, y, true, true, true, false, "linalg.lu_solve");
    return tri_solve(lu, y, false, true, false, false, "linalg.lu_solve");
  }
  at::Tensor w = tri_solve(lu, b, false, true, false, true, "linalg.lu_solve");
  w = tri_solve(lu, w, true, true, true, true, "linalg.lu_solve");
  return apply_pivots(w, pivots, true, batch);
}

at::Tensor lu_solve(const at::Tensor& lu, const at::Tensor& pivots, const at::Tensor& b, bool left, bool adjoint) {
  if (left) return lu_solve_left(lu, pivots, b, adjoint);
  // X op(A) = B  <=>  op(A)^H X^H = B^H
  return lu_solve_left(lu, pivots, b.mH(), !adjoint).mH();
}

at::Tensor& k_lu_solve_out(const at::Tensor& lu, const at::Tensor& pivots, const at::Tensor& b, bool left, bool adjoint,
                           at::Tensor& out) {
  check_float_or_complex_matrix(lu, "linalg.lu_solve", "LU");
  check_square(lu, "linalg.lu_solve", "LU");
  return write_out(lu_solve(lu, pivots, b, left, adjoint), out);
}

// ---- solve, inv, det, slogdet ------------------------------------------------------------------

bool vector_rhs(const at::Tensor& a, const at::Tensor& b) {
  return b.dim() == 1 || (a.dim() - 1 == b.dim() && b.sizes() == a.sizes().slice(0, a.dim() - 1));
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> k_solve_ex_out(const at::Tensor& a, const at::Tensor& b,
                                                                              bool left, bool check_errors,
                                                                              at::Tensor& result, at::Tensor& lu,
                                                                              at::Tensor& pivots, at::Tensor& info) {
  check_float_or_complex_matrix(a, "linalg.solve");
  check_square(a, "linalg.solve");
  Lu f = lu_factor(a, "linalg.solve");
  const bool vec = vector_rhs(a, b);
  const at::Tensor rhs = vec ? b.unsqueeze(-1) : b;
  at::Tensor x = lu_solve(f.lu, f.pivots, rhs.to(a.scalar_type()), left, false);
  write_out(vec ? x.squeeze(-1) : x, result);
  write_out(f.lu, lu);
  write_out(f.pivots, pivots);
  write_out(f.info, info);
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.solve_ex", a.dim() == 2);
  return {result, lu, pivots, info};
}

std::tuple<at::Tensor&, at::Tensor&> k_inv_ex_out(const at::Tensor& a, bool check_errors, at::Tensor& inverse,
                                                  at::Tensor& info) {
  check_float_or_complex_matrix(a, "linalg.inv");
  check_square(a, "linalg.inv");
  Lu f = lu_factor(a, "linalg.inv");
  Dims full = a.sizes().vec();
  at::Tensor eye = at::eye(a.size(-1), a.options()).expand(full);
  write_out(a.numel() == 0 ? at::empty(a.sizes(), a.options()) : lu_solve(f.lu, f.pivots, eye, true, false), inverse);
  write_out(f.info, info);
  if (check_errors) at::_linalg_check_errors(info, "linalg.inv_ex", a.dim() == 2);
  return {inverse, info};
}

std::vector<at::Tensor> lu_det(const Lu& f, const Dims& batch) {
  const int64_t n = f.lu.size(-1);
  if (n == 0 || numel_of(batch) == 0) {
    at::Tensor one = at::ones(batch, f.lu.options());
    return {one, at::zeros(batch, f.lu.options().dtype(c10::toRealValueType(f.lu.scalar_type()))), one};
  }
  OpRunner r("lu_det", "aten::linalg_det");
  Dims piv_batch = batch;
  piv_batch.push_back(n);
  r.input(as3d(f.lu, batch)).input(f.pivots.reshape({numel_of(batch), n}), at::kInt);
  auto out = r.run(3);
  for (auto& t : out) t = t.reshape(batch);
  return out;
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> k_det_out(const at::Tensor& a, at::Tensor& result, at::Tensor& lu,
                                                            at::Tensor& pivots) {
  check_float_or_complex_matrix(a, "linalg.det");
  check_square(a, "linalg.det");
  // Like ATen, factor A^T (a row-major A read as column-major): det is the same, and the
  // backward formula expects this LU.
  Lu f = lu_factor(a.mT(), "linalg.det");
  write_out(lu_det(f, batch_dims(a))[2], result);
  write_out(f.lu, lu);
  write_out(f.pivots, pivots);
  return {result, lu, pivots};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> k_slogdet_out(const at::Tensor& a, at::Tensor& sign,
                                                                             at::Tensor& logabsdet, at::Tensor& lu,
                                                                             at::Tensor& pivots) {
  check_float_or_complex_matrix(a, "linalg.slogdet");
  check_square(a, "linalg.slogdet");
  Lu f = lu_factor(a.mT(), "linalg.slogdet");  // A^T, as in k_det_out
  auto d = lu_det(f, batch_dims(a));
  write_out(d[0], sign);
  write_out(d[1], logabsdet);
  write_out(f.lu, lu);
  write_out(f.pivots, pivots);
  return {sign, logabsdet, lu, pivots};
}

// ---- Cholesky-based solves ------------------------------------------------------------------------

// (L L^T)^{-1} B for lower factors, (U^T U)^{-1} B for upper ones.
at::Tensor cholesky_solve(const at::Tensor& b, const at::Tensor& factor, bool upper, const char* api) {
  if (!upper) {
    at::Tensor y = tri_solve(factor, b, true, true, false, false, api);
    return tri_solve(factor, y, true, true, false, true, api);
  }
  at::Tensor y = tri_solve(factor, b, false, true, false, true, api);
  return tri_solve(factor, y, false, true, false, false, api);
}

at::Tensor k_cholesky_solve_helper(const at::Tensor& b, const at::Tensor& factor, bool upper) {
  return cholesky_solve(b, factor, upper, "cholesky_solve");
}

at::Tensor k_cholesky_inverse(const at::Tensor& factor, bool upper) {
  check_float_or_complex_matrix(factor, "cholesky_inverse", "input");
  check_square(factor, "cholesky_inverse", "input");
  at::Tensor eye = at::eye(factor.size(-1), factor.options()).expand(factor.sizes());
  return cholesky_solve(eye, factor, upper, "cholesky_inverse");
}
at::Tensor& k_cholesky_inverse_out(const at::Tensor& factor, bool upper, at::Tensor& out) {
  return write_out(k_cholesky_inverse(factor, upper), out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("linalg_cholesky_ex.L", k_cholesky_ex_out);
  m.impl("cholesky", torch::CppFunction::makeFromBoxedFunction<&k_cholesky_boxed>());
  m.impl("cholesky.out", k_cholesky_out);
  m.impl("linalg_solve_triangular", k_solve_triangular);
  m.impl("linalg_solve_triangular.out", k_solve_triangular_out);
  m.impl("triangular_solve.X", k_triangular_solve_out);
  m.impl("linalg_lu_factor_ex.out", k_lu_factor_ex_out);
  m.impl("linalg_lu.out", k_lu_out);
  m.impl("lu_unpack.out", k_lu_unpack_out);
  m.impl("linalg_lu_solve.out", k_lu_solve_out);
  m.impl("_linalg_solve_ex.result", k_solve_ex_out);
  m.impl("linalg_inv_ex.inverse", k_inv_ex_out);
  m.impl("_linalg_det.result", k_det_out);
  m.impl("_linalg_slogdet.sign", k_slogdet_out);
  m.impl("_cholesky_solve_helper", k_cholesky_solve_helper);
  m.impl("cholesky_inverse", k_cholesky_inverse);
  m.impl("cholesky_inverse.out", k_cholesky_inverse_out);
}

}  // namespace
}  // namespace tpu::aten
