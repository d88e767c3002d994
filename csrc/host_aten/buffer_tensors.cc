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

void write_result(const host_kernels::HostCall& call, int64_t index, const at::Tensor& value) {
  at::Tensor out = tensor_of(call.result(index));
  if (!out.sizes().equals(value.sizes())) throw std::invalid_argument("a result has an unexpected shape");
  out.copy_(value);
}

}  // namespace tpu::host_aten
