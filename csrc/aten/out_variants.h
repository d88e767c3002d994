// The out= convention shared by all kernels: check the dtype, resize `out` (with PyTorch's
// warning for non-empty outputs of the wrong shape), then copy the result in.
#pragma once

#include <ATen/core/Tensor.h>

namespace tpu::aten {

at::Tensor& write_out(const at::Tensor& result, at::Tensor& out);

}  // namespace tpu::aten
