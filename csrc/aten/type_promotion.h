// PyTorch's type promotion for tpu kernels, in one place. Everything defers to ATen's own
// rules (at::native::result_type, canCast) so results match the CPU exactly.
#pragma once

#include <ATen/core/Tensor.h>

namespace tpu::aten {

// The dtype `a op b` computes in (wrapped Python numbers and 0-dim tensors promote as in ATen).
at::ScalarType promote(const at::Tensor& a, const at::Tensor& b);
at::ScalarType promote(const at::Tensor& a, const at::Scalar& b);
// Integral and bool dtypes become the default float dtype (true division, mean, ...).
at::ScalarType integral_to_float(at::ScalarType t);
// The dtype sums accumulate in: float32 for half types, int64 for integers and bool.
at::ScalarType accumulate_type(at::ScalarType t);
// Raises PyTorch's error when an in-place/out result of dtype `result` cannot be stored in `out`.
void check_can_cast(at::ScalarType result, const at::Tensor& out);
bool is_one(const at::Scalar& s);
bool is_zero(const at::Scalar& s);

}  // namespace tpu::aten
