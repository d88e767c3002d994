// linalg.ldl_factor(_ex) and linalg.ldl_solve: Bunch-Kaufman LDL^T / LDL^H in LAPACK's packed
// form (lowering/linalg_ldl.cc), batch dimensions broadcast and flattened here.
#include <ATen/ExpandUtils.h>
#include <ATen/ops/_linalg_check_errors.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "aten/linalg_common.h"
#include "aten/op_runner.h"
#include "aten/out_variants.h"

namespace tpu::aten {
namespace {

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> k_ldl_factor_ex_out(const at::Tensor& a, bool hermitian,
                                                                      bool check_errors, at::Tensor& ld,
                                                                      at::Tensor& pivots, at::Tensor& info) {
  check_float_or_complex_matrix(a, "torch.linalg.ldl_factor_ex");
  check_square(a, "torch.linalg.ldl_factor_ex");
  const Dims batch = batch_dims(a);
  Dims piv_shape = batch;
  piv_shape.push_back(a.size(-1));
  if (a.numel() == 0) {
    write_out(at::empty(a.sizes(), a.options()), ld);
    write_out(at::empty(piv_shape, a.options().dtype(at::kInt)), pivots);
    write_out(at::zeros(batch, a.options().dtype(at::kInt)), info);
    return {ld, pivots, info};
  }
  OpRunner r("ldl_factor", "linalg.ldl_factor");
  r.input(as3d(a, batch));
  r.attrs().set_bool("hermitian", hermitian);
  auto out = r.run(3);
  write_out(unflatten(out[0], batch), ld);
  write_out(out[1].reshape(piv_shape), pivots);
  write_out(out[2].reshape(batch), info);
  if (check_errors) at::_linalg_check_errors(info, "torch.linalg.ldl_factor_ex", a.dim() == 2);
  return {ld, pivots, info};
}

at::Tensor& k_ldl_solve_out(const at::Tensor& ld, const at::Tensor& pivots, const at::Tensor& b, bool hermitian,
                            at::Tensor& out) {
  const char* api = "torch.linalg.ldl_solve";
  check_float_or_complex_matrix(ld, api, "LD");
  check_square(ld, api, "LD");
  TORCH_CHECK(b.dim() >= 2, api, ": Expected B to have at least 2 dimensions, but it has ", b.dim(), " dimensions instead");
  TORCH_CHECK(pivots.scalar_type() == at::kInt, api, ": Expected pivots to be integers. Got ", pivots.scalar_type());
  TORCH_CHECK(ld.scalar_type() == b.scalar_type(), "Expected b and A to have the same dtype, but found b of type ",
              b.scalar_type(), " and A of type ", ld.scalar_type(), " instead.");
  TORCH_CHECK(pivots.sizes() == ld.sizes().slice(0, ld.dim() - 1), api,
              ": Expected LD.shape[:-1] and pivots.shape to be the same, but got pivots with shape ", pivots.sizes(),
              " instead");
  TORCH_CHECK(b.size(-2) == ld.size(-1), "Incompatible matrix sizes for ", api, ": each A matrix is ", ld.size(-2),
              " by ", ld.size(-1), " but each b matrix is ", b.size(-2), " by ", b.size(-1));
  const Dims batch = at::infer_size(batch_dims(ld), batch_dims(b));
  Dims out_shape = batch;
  out_shape.insert(out_shape.end(), {b.size(-2), b.size(-1)});
  if (numel_of(out_shape) == 0) return write_out(at::empty(out_shape, b.options()), out);
  Dims piv_shape = batch;
  piv_shape.push_back(ld.size(-1));
  OpRunner r("ldl_solve", "linalg.ldl_solve");
  r.input(as3d(ld, batch)).input(pivots.expand(piv_shape).reshape({numel_of(batch), ld.size(-1)})).input(as3d(b, batch));
  r.attrs().set_bool("hermitian", hermitian);
  return write_out(r.run1().reshape(out_shape), out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("linalg_ldl_factor_ex.out", k_ldl_factor_ex_out);
  m.impl("linalg_ldl_solve.out", k_ldl_solve_out);
}

}  // namespace
}  // namespace tpu::aten
