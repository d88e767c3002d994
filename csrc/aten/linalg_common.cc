#include "aten/linalg_common.h"

namespace tpu::aten {

void check_float_or_complex_matrix(const at::Tensor& t, const char* api, const char* arg) {
  TORCH_CHECK(t.dim() >= 2, api, ": The input tensor ", arg, " must have at least 2 dimensions.");
  const at::ScalarType s = t.scalar_type();
  TORCH_CHECK(s == at::kFloat || s == at::kDouble || s == at::kComplexFloat || s == at::kComplexDouble, api,
              ": Expected a float32, float64, complex64 or complex128 tensor for ", arg, " on tpu, but got ", s,
              ". Fix: convert with .float() (half-precision linear algebra is not supported).");
}

void check_square(const at::Tensor& t, const char* api, const char* arg) {
  TORCH_CHECK(t.size(-1) == t.size(-2), api, ": ", arg, " must be batches of square matrices, but they are ",
              t.size(-2), " by ", t.size(-1), " matrices");
}

Dims batch_dims(const at::Tensor& t) { return Dims(t.sizes().begin(), t.sizes().end() - 2); }

int64_t numel_of(const Dims& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

at::Tensor as3d(const at::Tensor& t, const Dims& batch) {
  Dims full = batch;
  full.push_back(t.size(-2));
  full.push_back(t.size(-1));
  return t.expand(full).reshape({numel_of(batch), t.size(-2), t.size(-1)});
}

at::Tensor unflatten(const at::Tensor& t3, const Dims& batch) {
  Dims full = batch;
  for (int64_t i = 1; i < t3.dim(); ++i) full.push_back(t3.size(i));
  return t3.reshape(full);
}

}  // namespace tpu::aten
