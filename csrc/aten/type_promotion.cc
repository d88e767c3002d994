#include "aten/type_promotion.h"

#include <ATen/ops/result_type_native.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/ScalarType.h>

namespace tpu::aten {

at::ScalarType promote(const at::Tensor& a, const at::Tensor& b) {
  return at::native::result_type(a, b);
}

at::ScalarType promote(const at::Tensor& a, const at::Scalar& b) {
  return at::native::result_type(a, b);
}

at::ScalarType integral_to_float(at::ScalarType t) {
  if (c10::isIntegralType(t, /*includeBool=*/true)) return c10::typeMetaToScalarType(c10::get_default_dtype());
  return t;
}

at::ScalarType accumulate_type(at::ScalarType t) {
  if (t == at::kHalf || t == at::kBFloat16) return at::kFloat;
  if (c10::isIntegralType(t, /*includeBool=*/true)) return at::kLong;
  return t;
}

void check_can_cast(at::ScalarType result, const at::Tensor& out) {
  TORCH_CHECK(c10::canCast(result, out.scalar_type()), "result type ", result,
              " can't be cast to the desired output type ", out.scalar_type());
}

bool is_one(const at::Scalar& s) {
  if (s.isComplex()) return s.toComplexDouble() == c10::complex<double>(1.0, 0.0);
  return s.isFloatingPoint() ? s.toDouble() == 1.0 : (s.isBoolean() ? s.toBool() : s.toLong() == 1);
}

bool is_zero(const at::Scalar& s) {
  if (s.isComplex()) return s.toComplexDouble() == c10::complex<double>(0.0, 0.0);
  return s.isFloatingPoint() ? s.toDouble() == 0.0 : (s.isBoolean() ? !s.toBool() : s.toLong() == 0);
}

}  // namespace tpu::aten
