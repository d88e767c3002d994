// mm, bmm, addmm. matmul and linear are PyTorch composites built on these.
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "aten/precision_policy.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

// The operands share one dtype the CPU has matrix products for (not bool: its NotImplementedError).
void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected ", what, " to have the same dtype, but got: ",
              a.scalar_type(), " != ", b.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(a.scalar_type() != at::kBool || a.numel() == 0 || b.numel() == 0,
                              "matrix products are not implemented for 'Bool'");
}

at::Tensor k_mm(const at::Tensor& self, const at::Tensor& mat2) {
  check_same_dtype(self, mat2, "m1 and m2");
  OpRunner r("mm", "aten::mm");
  mark_matmul_precision(r, self.scalar_type());
  return r.input(self).input(mat2).run1();
}
at::Tensor& k_mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  return write_out(k_mm(self, mat2), out);
}

at::Tensor k_bmm(const at::Tensor& self, const at::Tensor& mat2) {
  check_same_dtype(self, mat2, "batch1 and batch2");
  OpRunner r("bmm", "aten::bmm");
  mark_matmul_precision(r, self.scalar_type());
  return r.input(self).input(mat2).run1();
}
at::Tensor& k_bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  return write_out(k_bmm(self, mat2), out);
}

at::Tensor k_mv(const at::Tensor& self, const at::Tensor& vec) {
  check_same_dtype(self, vec, "self and vec");
  OpRunner r("mv", "aten::mv");
  mark_matmul_precision(r, self.scalar_type());
  return r.input(self).input(vec).run1();
}
at::Tensor& k_mv_out(const at::Tensor& self, const at::Tensor& vec, at::Tensor& out) {
  return write_out(k_mv(self, vec), out);
}

at::Tensor k_dot(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), "dot : expected both vectors to have same dtype, but found ",
              self.scalar_type(), " and ", other.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool, "\"dot\" not implemented for 'Bool'");
  OpRunner r("dot", "aten::dot");
  mark_matmul_precision(r, self.scalar_type());
  return r.input(self).input(other).run1();
}
at::Tensor& k_dot_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  return write_out(k_dot(self, other), out);
}

// addmm / addmv: bias + product with beta/alpha; `lowering` names which product.
OpRunner add_product_runner(const char* lowering, const at::Tensor& self, const at::Tensor& m1,
                            const at::Tensor& m2, const at::Scalar& beta, const at::Scalar& alpha,
                            const char* label) {
  check_same_dtype(m1, m2, "mat1 and mat2");
  check_same_dtype(self, m1, "self and mat2");
  const at::ScalarType dtype = m1.scalar_type();
  OpRunner r(lowering, label);
  r.input(self, dtype).input(m1, dtype).input(m2, dtype).scalar(beta, dtype).scalar(alpha, dtype);
  r.attrs().set_int("beta_mode", is_zero(beta) ? 0 : (is_one(beta) ? 1 : 2));
  r.attrs().set_bool("alpha_is_one", is_one(alpha));
  mark_matmul_precision(r, dtype);
  return r;
}

at::Tensor k_addmm(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                 const at::Scalar& beta, const at::Scalar& alpha) {
  return add_product_runner("addmm", self, m1, m2, beta, alpha, "aten::addmm").run1();
}
at::Tensor& k_addmm_(at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  add_product_runner("addmm", self, m1, m2, beta, alpha, "aten::addmm_").run_into(self);
  return self;
}
at::Tensor& k_addmm_out(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  return write_out(k_addmm(self, m1, m2, beta, alpha), out);
}

at::Tensor k_addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  return add_product_runner("addmv", self, mat, vec, beta, alpha, "aten::addmv").run1();
}
at::Tensor& k_addmv_(at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                     const at::Scalar& beta, const at::Scalar& alpha) {
  add_product_runner("addmv", self, mat, vec, beta, alpha, "aten::addmv_").run_into(self);
  return self;
}
at::Tensor& k_addmv_out(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec,
                        const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  return write_out(k_addmv(self, mat, vec, beta, alpha), out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mv", k_mv);
  m.impl("mv.out", k_mv_out);
  m.impl("dot", k_dot);
  m.impl("dot.out", k_dot_out);
  m.impl("addmv", k_addmv);
  m.impl("addmv_", k_addmv_);
  m.impl("addmv.out", k_addmv_out);
  m.impl("mm", k_mm);
  m.impl("mm.out", k_mm_out);
  m.impl("bmm", k_bmm);
  m.impl("bmm.out", k_bmm_out);
  m.impl("addmm", k_addmm);
  m.impl("addmm_", k_addmm_);
  m.impl("addmm.out", k_addmm_out);
}

}  // namespace
}  // namespace tpu::aten
