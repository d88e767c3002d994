// add, sub, mul, div: functional, in-place and out= variants over one lowering each.
#include <ATen/native/BinaryOps.h>
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

// One binary op: its lowering, how it picks the compute dtype, extra attributes.
struct Binary {
  const char* lowering;
  const char* label;
  bool true_division = false;  // integral inputs compute in the default float dtype
  int64_t rounding_mode = 0;   // div only
};

at::ScalarType compute_dtype(const Binary& op, const at::Tensor& a, const at::Tensor& b) {
  const at::ScalarType t = promote(a, b);
  return op.true_division ? integral_to_float(t) : t;
}

OpRunner prepare(const Binary& op, const at::Tensor& a, const at::Tensor& b, at::ScalarType dtype,
                 const std::optional<at::Scalar>& alpha) {
  OpRunner r(op.lowering, op.label);
  r.input(a, dtype).input(b, dtype);
  if (alpha && !is_one(*alpha)) r.scalar(*alpha, dtype);
  if (op.rounding_mode != 0) r.attrs().set_int("rounding_mode", op.rounding_mode);
  return r;
}

at::Tensor functional(const Binary& op, const at::Tensor& a, const at::Tensor& b,
                      const std::optional<at::Scalar>& alpha = std::nullopt) {
  const at::ScalarType dtype = compute_dtype(op, a, b);
  if (alpha) at::native::alpha_check(dtype, *alpha);
  return prepare(op, a, b, dtype, alpha).run1();
}

at::Tensor& inplace(const Binary& op, at::Tensor& self, const at::Tensor& other,
                    const std::optional<at::Scalar>& alpha = std::nullopt) {
  const at::ScalarType dtype = compute_dtype(op, self, other);
  if (alpha) at::native::alpha_check(dtype, *alpha);
  check_can_cast(dtype, self);
  prepare(op, self, other, dtype, alpha).run_into(self);
  return self;
}

const Binary kAdd{"add", "aten::add"};
const Binary kSub{"sub", "aten::sub"};
const Binary kMul{"mul", "aten::mul"};
const Binary kDiv{"div", "aten::div", /*true_division=*/true};
const Binary kDivTrunc{"div", "aten::div(rounding_mode='trunc')", false, 1};
const Binary kDivFloor{"div", "aten::div(rounding_mode='floor')", false, 2};

const Binary& div_mode(std::optional<c10::string_view> mode) {
  if (!mode.has_value()) return kDiv;
  if (*mode == "trunc") return kDivTrunc;
  if (*mode == "floor") return kDivFloor;
  TORCH_CHECK(false, "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
              *mode, "'");
}

at::Tensor k_add(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return functional(kAdd, a, b, alpha);
}
at::Tensor& k_add_(at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return inplace(kAdd, a, b, alpha);
}
at::Tensor& k_add_out(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha, at::Tensor& out) {
  return write_out(k_add(a, b, alpha), out);
}

at::Tensor k_sub(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  at::native::sub_check(a, b);
  return functional(kSub, a, b, alpha);
}
at::Tensor& k_sub_(at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  at::native::sub_check(a, b);
  return inplace(kSub, a, b, alpha);
}
at::Tensor& k_sub_out(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha, at::Tensor& out) {
  return write_out(k_sub(a, b, alpha), out);
}

at::Tensor k_mul(const at::Tensor& a, const at::Tensor& b) { return functional(kMul, a, b); }
at::Tensor& k_mul_(at::Tensor& a, const at::Tensor& b) { return inplace(kMul, a, b); }
at::Tensor& k_mul_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  return write_out(k_mul(a, b), out);
}

at::Tensor k_div(const at::Tensor& a, const at::Tensor& b) { return functional(kDiv, a, b); }
at::Tensor& k_div_(at::Tensor& a, const at::Tensor& b) { return inplace(kDiv, a, b); }
at::Tensor& k_div_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  return write_out(k_div(a, b), out);
}
at::Tensor k_div_mode_fn(const at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) {
  return functional(div_mode(mode), a, b);
}
at::Tensor& k_div_mode_(at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) {
  return inplace(div_mode(mode), a, b);
}
at::Tensor& k_div_mode_out(const at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode,
                         at::Tensor& out) {
  return write_out(k_div_mode_fn(a, b, mode), out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", k_add);
  m.impl("add_.Tensor", k_add_);
  m.impl("add.out", k_add_out);
  m.impl("sub.Tensor", k_sub);
  m.impl("sub_.Tensor", k_sub_);
  m.impl("sub.out", k_sub_out);
  m.impl("mul.Tensor", k_mul);
  m.impl("mul_.Tensor", k_mul_);
  m.impl("mul.out", k_mul_out);
  m.impl("div.Tensor", k_div);
  m.impl("div_.Tensor", k_div_);
  m.impl("div.out", k_div_out);
  m.impl("div.Tensor_mode", k_div_mode_fn);
  m.impl("div_.Tensor_mode", k_div_mode_);
  m.impl("div.out_mode", k_div_mode_out);
}

}  // namespace
}  // namespace tpu::aten

namespace tpu::aten {
namespace {

int64_t exponent_kind(const at::Scalar& e) {
  const double d = e.toDouble();
  if (d == 0) return 1;
  if (d == 1) return 2;
  if (d == 2) return 3;
  if (d == 0.5) return 4;
  if (d == -1) return 5;
  return 0;
}

at::Tensor k_pow_scalar(const at::Tensor& self, const at::Scalar& exponent) {
  const at::ScalarType dtype = promote(self, exponent);
  TORCH_CHECK(!(c10::isIntegralType(dtype, true) && exponent.isIntegral(true) && exponent.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
  int64_t kind = exponent_kind(exponent);
  if (kind == 4 || kind == 5) kind = c10::isFloatingType(dtype) ? kind : 0;
  OpRunner r("pow", "aten::pow");
  r.input(self, dtype).scalar(exponent, dtype);
  r.attrs().set_int("exponent_kind", kind);
  return r.run1();
}
at::Tensor& k_pow_scalar_out(const at::Tensor& self, const at::Scalar& exponent, at::Tensor& out) {
  return write_out(k_pow_scalar(self, exponent), out);
}
at::Tensor& k_pow_scalar_(at::Tensor& self, const at::Scalar& exponent) {
  check_can_cast(promote(self, exponent), self);
  return self.copy_(k_pow_scalar(self, exponent));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("pow.Tensor_Scalar", k_pow_scalar);
  m.impl("pow.Tensor_Scalar_out", k_pow_scalar_out);
  m.impl("pow_.Scalar", k_pow_scalar_);
}

}  // namespace
}  // namespace tpu::aten
