// torch.fft on tpu: PyTorch's fft functions (fft, ifft, rfft, irfft, fftn, hfft, stft, ...) all
// reach these three primitives, which run as lowering/fft.cc programs.
#include <ATen/native/Resize.h>
#include <ATen/WrapDimUtils.h>
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "aten/tensor_access.h"

namespace tpu::aten {
namespace {

hlo::Dims wrapped(const at::Tensor& self, at::IntArrayRef dim, const char* name) {
  hlo::Dims out;
  for (int64_t d : dim) out.push_back(at::maybe_wrap_dim(d, self.dim()));
  TORCH_CHECK(!out.empty(), name, ": expected at least one dimension to transform");
  return out;
}

at::Tensor k_fft_c2c(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, bool forward) {
  TORCH_CHECK(self.is_complex(), "_fft_c2c: expected a complex input tensor, got ", self.scalar_type());
  const hlo::Dims dims = wrapped(self, dim, "_fft_c2c");
  at::Tensor out = empty_on(self.sizes(), self.scalar_type(), tpu_index(self));
  OpRunner r("fft_c2c", "aten::_fft_c2c");
  r.input(self);
  r.attrs().set_ints("dim", dims).set_int("normalization", normalization).set_bool("forward", forward);
  r.run_into(out);
  return out;
}

at::Tensor k_fft_r2c(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, bool onesided) {
  TORCH_CHECK(self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble,
              "_fft_r2c: expected a float32 or float64 input tensor, got ", self.scalar_type());
  const hlo::Dims dims = wrapped(self, dim, "_fft_r2c");
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  if (onesided) shape[dims.back()] = shape[dims.back()] / 2 + 1;
  at::Tensor out = empty_on(shape, c10::toComplexType(self.scalar_type()), tpu_index(self));
  OpRunner r("fft_r2c", "aten::_fft_r2c");
  r.input(self);
  r.attrs().set_ints("dim", dims).set_int("normalization", normalization).set_bool("onesided", onesided);
  r.run_into(out);
  return out;
}

at::Tensor k_fft_c2r(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, int64_t last_dim_size) {
  TORCH_CHECK(self.is_complex(), "_fft_c2r: expected a complex input tensor, got ", self.scalar_type());
  const hlo::Dims dims = wrapped(self, dim, "_fft_c2r");
  TORCH_CHECK(last_dim_size >= 1, "_fft_c2r: invalid number of data points (", last_dim_size, ") specified");
  TORCH_CHECK(self.size(dims.back()) >= last_dim_size / 2 + 1, "_fft_c2r: the last transformed dimension has ",
              self.size(dims.back()), " elements, fewer than last_dim_size / 2 + 1 = ", last_dim_size / 2 + 1);
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  shape[dims.back()] = last_dim_size;
  at::Tensor out = empty_on(shape, c10::toRealValueType(self.scalar_type()), tpu_index(self));
  OpRunner r("fft_c2r", "aten::_fft_c2r");
  r.input(self);
  r.attrs().set_ints("dim", dims).set_int("normalization", normalization).set_int("last_dim_size", last_dim_size);
  r.run_into(out);
  return out;
}

at::Tensor& k_fft_c2c_out(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, bool forward,
                          at::Tensor& out) {
  return write_out(k_fft_c2c(self, dim, normalization, forward), out);
}
at::Tensor& k_fft_r2c_out(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, bool onesided,
                          at::Tensor& out) {
  return write_out(k_fft_r2c(self, dim, normalization, onesided), out);
}
at::Tensor& k_fft_c2r_out(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, int64_t last_dim_size,
                          at::Tensor& out) {
  return write_out(k_fft_c2r(self, dim, normalization, last_dim_size), out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fft_c2c", k_fft_c2c);
  m.impl("_fft_c2c.out", k_fft_c2c_out);
  m.impl("_fft_r2c", k_fft_r2c);
  m.impl("_fft_r2c.out", k_fft_r2c_out);
  m.impl("_fft_c2r", k_fft_c2r);
  m.impl("_fft_c2r.out", k_fft_c2r_out);
}

}  // namespace
}  // namespace tpu::aten
