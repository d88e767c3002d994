#include "host_aten/extreme_kernel.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "host_aten/buffer_tensors.h"
#include "host_aten/kernel_call.h"
#include "host_kernels/ffi_call_frame.h"
#include "host_kernels/registry.h"

namespace tpu::host_aten {
namespace {

using host_kernels::HostCall;

void run(const HostCall& call) {
  if (call.num_args() != 1 || call.num_results() != 1) throw std::invalid_argument("takes one array, gives one");
  const at::Tensor x = tensor_of(call.arg(0));
  const int64_t n = static_cast<int64_t>(call.scalar_attr("ndims", -1));
  if (n < 0 || n > x.dim()) throw std::invalid_argument("bad ndims");
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < n; ++i) dims.push_back(static_cast<int64_t>(call.scalar_attr("dim" + std::to_string(i), -1)));
  const bool want_max = call.scalar_attr("max", 1) != 0;
  write_result(call, 0, want_max ? at::amax(x, dims) : at::amin(x, dims));
}

host_kernels::ffi_abi::Error* handle(host_kernels::ffi_abi::CallFrame* frame) { return run_kernel(frame, kExtreme, &run); }

void* handler() { return reinterpret_cast<void*>(&handle); }

const bool kAdded = host_kernels::add_extension_kernel(kExtreme, &handler, nullptr);

}  // namespace
}  // namespace tpu::host_aten
