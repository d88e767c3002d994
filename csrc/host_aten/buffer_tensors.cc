#include "host_aten/buffer_tensors.h"

#include <stdexcept>

namespace tpu::host_aten {

at::Tensor tensor_of(const host_kernels::ffi_abi::Buffer& b) {
  at::ScalarType t;
  switch (b.dtype) {
    case host_kernels::ffi_abi::kF32: t = at::kFloat; break;
    case host_kernels::ffi_abi::kF64: t = at::kDouble; break;
    default: throw std::invalid_argument("expects float32 or float64 buffers");
  }
  return at::from_blob(b.data, at::IntArrayRef(b.dims, static_cast<size_t>(b.rank)), at::TensorOptions().dtype(t));
}

namespace {
void write_into(at::Tensor out, const at::Tensor& value) {
  if (!out.sizes().equals(value.sizes())) throw std::invalid_argument("a result has an unexpected shape");
  out.copy_(value);
}
}  // namespace

void write_result(const host_kernels::HostCall& call, int64_t index, const at::Tensor& value) {
  write_into(tensor_of(call.result(index)), value);
}

void write_result_rows(const host_kernels::HostCall& call, int64_t index, int64_t begin, const at::Tensor& value) {
  const at::Tensor out = tensor_of(call.result(index));
  if (value.dim() == 0 || out.dim() == 0 || begin + value.size(0) > out.size(0)) {
    throw std::invalid_argument("a result block is outside the result");
  }
  write_into(out.narrow(0, begin, value.size(0)), value);
}

at::Tensor sum_of_blocks(const std::vector<at::Tensor>& parts) {
  at::Tensor sum = parts.at(0);
  for (size_t i = 1; i < parts.size(); ++i) sum = sum + parts[i];
  return sum;
}

}  // namespace tpu::host_aten
