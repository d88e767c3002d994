// Python bindings of custom kernels (torch_tpu.kernels): register a kernel's StableHLO
// functions, and run one on tpu tensors as an op (lowering "custom_kernel").
#pragma once

#include <pybind11/pybind11.h>

namespace tpu::python {

void bind_custom_kernels(pybind11::module_& m);

}  // namespace tpu::python
