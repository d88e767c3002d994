// Decompositions: symmetric eigen-decomposition, SVD (through the eigen-decomposition of the
// Jordan-Wielandt matrix), QR (geqrf, householder_product, ormqr) and least squares. The
// lowerings (lowering/linalg_factor.cc) use XLA's "Eigh", "Qr" and
// "ProductOfElementaryHouseholderReflectors" expansions.
#include <ATen/ops/empty.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>

#include "aten/linalg_common.h"
#include "aten/op_runner.h"
#include "aten/out_variants.h"

namespace tpu::aten {
namespace {

std::tuple<at::Tensor&, at::Tensor&> k_eigh_out(const at::Tensor& a, c10::string_view uplo, bool compute_v,
                                                at::Tensor& values, at::Tensor& vectors) {
  check_float_or_complex_matrix(a, "linalg.eigh");  // Hermitian complex matrices too: real eigenvalues
  check_square(a, "linalg.eigh");
  TORCH_CHECK(uplo == "L" || uplo == "U", "Expected UPLO argument to be 'L' or 'U', but got ", uplo);
  const Dims batch = batch_dims(a);
  const int64_t n = a.size(-1);
  Dims vshape = batch;
  vshape.push_back(n);
  if (a.numel() == 0) {
    write_out(at::empty(vshape, a.options().dtype(c10::toRealValueType(a.scalar_type()))), values);
    if (compute_v) write_out(at::empty(a.sizes(), a.options()), vectors);
    return {values, vectors};
  }
  OpRunner r("eigh", "linalg.eigh");
  r.input(as3d(a, batch));
  r.attrs().set_bool("lower", uplo == "L");
  auto out = r.run(2);
  write_out(out[0].reshape(vshape), values);
  if (compute_v) write_out(unflatten(out[1], batch), vectors);
  return {values, vectors};
}

at::Tensor complete_basis(const at::Tensor& q);
std::pair<at::Tensor, at::Tensor> geqrf(const at::Tensor& a, const char* api);
at::Tensor householder_product(const at::Tensor& v, const at::Tensor& tau);
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> svd_through_qr(const at::Tensor& a, bool full_matrices, bool compute_uv,
                                                                 at::Tensor& u, at::Tensor& s, at::Tensor& vh);

// Eigen-decomposition of symmetric [B, n, n] matrices (ascending values, vectors as columns).
std::pair<at::Tensor, at::Tensor> eigh3(const at::Tensor& a3, bool lower, const char* api) {
  OpRunner r("eigh", api);
  r.input(a3);
  r.attrs().set_bool("lower", lower);
  auto out = r.run(2);
  return {out[0], out[1]};
}

// SVD through the symmetric Jordan-Wielandt matrix [[0, A], [A^T, 0]], whose eigenvalues are
// +-sigma_i (and zeros) with eigenvectors (u_i, +-v_i) / sqrt(2): singular values to working
// precision without squaring A's condition number. The singular vectors of zero singular
// values are completed by QR (orthonormal complements). Non-square A goes through its QR
// first (svd_through_qr).
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> k_svd_out(const at::Tensor& a, bool full_matrices, bool compute_uv,
                                                            std::optional<c10::string_view> driver, at::Tensor& u,
                                                            at::Tensor& s, at::Tensor& vh) {
  check_float_or_complex_matrix(a, "linalg.svd");
  TORCH_CHECK(!driver.has_value(), "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER backend.");
  const Dims batch = batch_dims(a);
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n), bn = numel_of(batch);
  Dims sshape = batch;
  sshape.push_back(k);
  auto shape3 = [&](int64_t r, int64_t c) {
    Dims d = batch;
    d.insert(d.end(), {r, c});
    return d;
  };
  if (a.numel() == 0) {
    write_out(at::zeros(sshape, a.options().dtype(c10::toRealValueType(a.scalar_type()))), s);
    if (compute_uv) {
      const int64_t uc = full_matrices ? m : k, vr = full_matrices ? n : k;
      write_out(at::eye(m, uc, a.options()).expand(shape3(m, uc)).contiguous(), u);
      write_out(at::eye(vr, n, a.options()).expand(shape3(vr, n)).contiguous(), vh);
    }
    return {u, s, vh};
  }
  if (m != n) return svd_through_qr(a, full_matrices, compute_uv, u, s, vh);
  at::Tensor a3 = as3d(a, batch);
  at::Tensor j = at::zeros({bn, m + n, m + n}, a.options());
  j.narrow(1, 0, m).narrow(2, m, n).copy_(a3);
  j.narrow(1, m, n).narrow(2, 0, m).copy_(a3.mH());  // Hermitian: [[0, A], [A^H, 0]]
  auto [w, vecs] = eigh3(j, true, "linalg.svd");
  write_out(w.narrow(1, m + n - k, k).flip({1}).clamp_min(0).reshape(sshape), s);
  if (!compute_uv) return {u, s, vh};
  at::Tensor top = vecs.narrow(2, m + n - k, k).flip({2}) * std::sqrt(2.0);
  at::Tensor uu = top.narrow(1, 0, m), vv = top.narrow(1, m, n);
  // Zero singular values share J's eigenvalue 0 with the |m - n| extra ones: eigh returns
  // arbitrary mixes of (u, 0) and (0, v) there, so those halves are neither unit nor
  // orthogonal. From the first singular value that is negligible (or whose halves are not unit
  // vectors) on, both bases are completed instead: orthonormal complements of the columns
  // before it, which span A's left null space and null space.
  const at::Tensor sv = w.narrow(1, m + n - k, k).flip({1});
  const double eps = c10::toRealValueType(a.scalar_type()) == at::kDouble ? 2.220446049250313e-16 : 1.1920928955078125e-07;
  auto unit = [](const at::Tensor& c) { return (c.abs().pow(2).sum(-2) - 1).abs() < 1e-2; };
  at::Tensor good = (sv > sv.amax(-1, true) * (static_cast<double>(std::max(m, n)) * eps)).logical_and(unit(uu)).logical_and(unit(vv));
  good = good.to(at::kLong).cumprod(-1).unsqueeze(-2).to(uu.scalar_type());  // a prefix of the columns
  uu = complete_basis(uu * good);
  vv = complete_basis(vv * good);
  if (!full_matrices) {
    uu = uu.narrow(-1, 0, k);
    vv = vv.narrow(-1, 0, k);
  }
  write_out(unflatten(uu, batch), u);
  write_out(unflatten(vv.mH(), batch), vh);
  return {u, s, vh};
}

// A tall or wide A: QR first, as LAPACK's gesdd does when one side is much longer, so the
// Jordan-Wielandt eigh works on 2k x 2k instead of (m + n) x (m + n): A = Q R, R = U_r S V^H,
// U = Q U_r. A wide A is the adjoint of a tall one.
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> svd_through_qr(const at::Tensor& a, bool full_matrices, bool compute_uv,
                                                                 at::Tensor& u, at::Tensor& s, at::Tensor& vh) {
  const int64_t m = a.size(-2), n = a.size(-1);
  if (m < n) {
    at::Tensor ut = at::empty({0}, a.options()), vht = at::empty({0}, a.options());
    k_svd_out(a.mH(), full_matrices, compute_uv, std::nullopt, ut, s, vht);
    if (compute_uv) {
      write_out(vht.mH(), u);
      write_out(ut.mH(), vh);
    }
    return {u, s, vh};
  }
  auto [packed, tau] = geqrf(a, "linalg.svd");
  at::Tensor ur = at::empty({0}, a.options()), vr = at::empty({0}, a.options());
  k_svd_out(packed.narrow(-2, 0, n).triu(), false, compute_uv, std::nullopt, ur, s, vr);
  if (!compute_uv) return {u, s, vh};
  at::Tensor uu = householder_product(packed, tau).matmul(ur);  // A's reduced Q times R's U
  if (full_matrices) {
    const Dims batch = batch_dims(a);
    uu = unflatten(complete_basis(as3d(uu, batch)), batch);
  }
  write_out(uu, u);
  write_out(vr, vh);
  return {u, s, vh};
}

// Least squares through the SVD: the minimum-norm solution with singular values below
// rcond * sigma_max treated as zero (what gelsd computes; gelsy's answer for full-rank A).
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> k_lstsq_out(
    const at::Tensor& a, const at::Tensor& b, std::optional<double> rcond, std::optional<c10::string_view> driver,
    at::Tensor& solution, at::Tensor& residuals, at::Tensor& rank, at::Tensor& singular_values) {
  check_float_or_complex_matrix(a, "torch.linalg.lstsq");
  const std::string drv = driver.has_value() ? std::string(*driver) : "gelsy";
  TORCH_CHECK(drv == "gels" || drv == "gelsy" || drv == "gelsd" || drv == "gelss",
              "parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  const bool vec = b.dim() == a.dim() - 1;
  const at::Tensor rhs = (vec ? b.unsqueeze(-1) : b).to(a.scalar_type());
  TORCH_CHECK(rhs.size(-2) == a.size(-2), "torch.linalg.lstsq: input.size(-2) should match other.size(-2)");
  const int64_t m = a.size(-2), n = a.size(-1);
  const at::TensorOptions real = a.options().dtype(c10::toRealValueType(a.scalar_type()));
  at::Tensor u = at::empty({0}, a.options()), sv = at::empty({0}, real), vh = at::empty({0}, a.options());
  k_svd_out(a, false, true, std::nullopt, u, sv, vh);
  const double eps = real.dtype() == at::kDouble ? 2.220446049250313e-16 : 1.1920928955078125e-07;
  const double rc = rcond.has_value() && *rcond > 0 ? *rcond : eps * std::max(m, n);
  at::Tensor cutoff = (sv.numel() > 0 ? std::get<0>(sv.max(-1, true)) : at::zeros({}, sv.options())) * rc;
  at::Tensor keep = sv > cutoff;
  at::Tensor inv = at::where(keep, 1.0 / sv, at::zeros({}, sv.options())).to(a.scalar_type());
  at::Tensor x = vh.mH().matmul(inv.unsqueeze(-1) * u.mH().matmul(rhs));
  write_out(vec ? x.squeeze(-1) : x, solution);
  at::Tensor r = keep.sum(-1);
  const bool has_rank = drv != "gels";
  write_out(has_rank ? r : at::empty({0}, a.options().dtype(at::kLong)), rank);
  write_out((drv == "gelsd" || drv == "gelss") ? sv : at::empty({0}, real), singular_values);
  bool want_residuals = m > n && drv != "gelsy";
  if (want_residuals && drv != "gels") want_residuals = r.numel() == 0 || r.min().item<int64_t>() == n;  // host read
  at::Tensor res = at::empty({0}, real);
  if (want_residuals) {
    res = (a.matmul(x) - rhs).abs().pow(2).sum(-2);
    if (vec) res = res.squeeze(-1);
  }
  write_out(res, residuals);
  return {solution, residuals, rank, singular_values};
}

std::pair<at::Tensor, at::Tensor> geqrf(const at::Tensor& a, const char* api) {
  check_float_or_complex_matrix(a, api);
  const Dims batch = batch_dims(a);
  Dims tshape = batch;
  tshape.push_back(std::min(a.size(-2), a.size(-1)));
  if (a.numel() == 0) return {at::empty(a.sizes(), a.options()), at::zeros(tshape, a.options())};
  OpRunner r("geqrf", api);
  r.input(as3d(a, batch));
  auto out = r.run(2);
  return {unflatten(out[0], batch), out[1].reshape(tshape)};
}

std::tuple<at::Tensor, at::Tensor> k_geqrf(const at::Tensor& a) { return geqrf(a, "geqrf"); }
std::tuple<at::Tensor&, at::Tensor&> k_geqrf_out(const at::Tensor& a, at::Tensor& packed, at::Tensor& tau) {
  auto [p, t] = geqrf(a, "geqrf");
  write_out(p, packed);
  write_out(t, tau);
  return {packed, tau};
}

at::Tensor householder_product(const at::Tensor& v, const at::Tensor& tau) {
  check_float_or_complex_matrix(v, "linalg.householder_product", "input");
  TORCH_CHECK(v.size(-2) >= v.size(-1), "torch.linalg.householder_product: input.shape[-2] must be greater than or equal to input.shape[-1]");
  TORCH_CHECK(tau.size(-1) <= v.size(-1), "torch.linalg.householder_product: input.shape[-1] must be greater than or equal to tau.shape[-1]");
  const Dims batch = batch_dims(v);
  if (v.numel() == 0) return at::empty(v.sizes(), v.options());
  // taus past tau.size(-1) are zero: those reflectors are the identity
  at::Tensor taus = at::zeros(Dims{numel_of(batch), v.size(-1)}, v.options());
  if (tau.numel() > 0) taus.narrow(1, 0, tau.size(-1)).copy_(tau.reshape({numel_of(batch), tau.size(-1)}));
  OpRunner r("householder_product", "linalg.householder_product");
  r.input(as3d(v, batch)).input(taus);
  return unflatten(r.run1(), batch);
}

at::Tensor k_householder_product(const at::Tensor& v, const at::Tensor& tau) { return householder_product(v, tau); }
at::Tensor& k_householder_product_out(const at::Tensor& v, const at::Tensor& tau, at::Tensor& out) {
  return write_out(householder_product(v, tau), out);
}

// ormqr: C multiplied by Q (or Q^T) of a geqrf result, from the left or the right.
at::Tensor k_ormqr(const at::Tensor& packed, const at::Tensor& tau, const at::Tensor& c, bool left, bool transpose) {
  check_float_or_complex_matrix(packed, "torch.ormqr", "input");
  const int64_t m = packed.size(-2), k = packed.size(-1);
  TORCH_CHECK(c.size(left ? -2 : -1) == m, "torch.ormqr: other.shape[", left ? -2 : -1, "] must be equal to input.shape[-2]");
  Dims shape(packed.sizes().begin(), packed.sizes().end());
  shape.back() = m;
  at::Tensor wide = at::zeros(shape, packed.options());
  wide.narrow(-1, 0, std::min(k, m)).copy_(packed.narrow(-1, 0, std::min(k, m)));
  at::Tensor q = householder_product(wide, tau);
  if (transpose) q = q.mH();  // the conjugate transpose for complex (LAPACK's unmqr 'C')
  return left ? q.matmul(c) : c.matmul(q);
}
at::Tensor& k_ormqr_out(const at::Tensor& packed, const at::Tensor& tau, const at::Tensor& c, bool left, bool transpose,
                        at::Tensor& out) {
  return write_out(k_ormqr(packed, tau, c, left, transpose), out);
}

// [B, m, k] orthonormal columns (and zero columns after them) -> [B, m, m]: the orthonormal
// columns followed by an orthonormal basis of their complement (from a complete QR; column
// signs restored from R's diagonal).
at::Tensor complete_basis(const at::Tensor& q) {
  const int64_t m = q.size(-2), k = q.size(-1);
  auto [packed, tau] = geqrf(q, "linalg.svd");
  at::Tensor wide = at::zeros({q.size(0), m, m}, q.options());
  wide.narrow(-1, 0, k).copy_(packed);
  at::Tensor full = householder_product(wide, tau);
  at::Tensor signs = packed.diagonal(0, -2, -1).sgn();  // the unit phase for complex
  signs = at::where(signs == 0, at::ones({}, signs.options()), signs);
  full.narrow(-1, 0, k).mul_(signs.unsqueeze(-2));
  return full;
}

std::tuple<at::Tensor&, at::Tensor&> k_qr_out(const at::Tensor& a, c10::string_view mode, at::Tensor& q, at::Tensor& r) {
  TORCH_CHECK(mode == "reduced" || mode == "complete" || mode == "r", "qr received unrecognized mode '", mode,
              "' but expected one of 'reduced' (default), 'r', or 'complete'");
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  auto [packed, tau] = geqrf(a, "linalg.qr");
  const bool complete = mode == "complete" && m > n;
  write_out(complete ? packed.triu() : packed.narrow(-2, 0, k).triu(), r);
  if (mode == "r") {
    write_out(at::empty({0}, a.options()), q);
    return {q, r};
  }
  at::Tensor v = packed.narrow(-1, 0, k);
  if (complete) {
    Dims shape = a.sizes().vec();
    shape.back() = m;
    at::Tensor wide = at::zeros(shape, a.options());
    wide.narrow(-1, 0, k).copy_(v);
    v = wide;
  }
  write_out(householder_product(v, tau), q);
  return {q, r};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_linalg_eigh.eigenvalues", k_eigh_out);
  m.impl("geqrf", k_geqrf);
  m.impl("geqrf.a", k_geqrf_out);
  m.impl("linalg_householder_product", k_householder_product);
  m.impl("linalg_householder_product.out", k_householder_product_out);
  m.impl("linalg_qr.out", k_qr_out);
  m.impl("_linalg_svd.U", k_svd_out);
  m.impl("linalg_lstsq.out", k_lstsq_out);
  m.impl("ormqr", k_ormqr);
  m.impl("ormqr.out", k_ormqr_out);
}

}  // namespace
}  // namespace tpu::aten
