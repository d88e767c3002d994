// The FFI buffers of a host call seen as ATen CPU tensors (no copy): the host_aten kernels read
// their operands and write their results through these.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "host_kernels/ffi_call_frame.h"

namespace tpu::host_aten {

// The float32/float64 buffer as a CPU tensor over its memory; other dtypes throw.
at::Tensor tensor_of(const host_kernels::ffi_abi::Buffer& b);

// Copies `value` into result `index` of `call`, which must have its shape.
void write_result(const host_kernels::HostCall& call, int64_t index, const at::Tensor& value);
// The same for rows [begin, begin + value.size(0)) of result `index` (a block of its first dim).
void write_result_rows(const host_kernels::HostCall& call, int64_t index, int64_t begin, const at::Tensor& value);

// The sum of the per-block partial results of a for_blocks job (a weight gradient summed over
// batch blocks); `parts` is not empty.
at::Tensor sum_of_blocks(const std::vector<at::Tensor>& parts);

}  // namespace tpu::host_aten
