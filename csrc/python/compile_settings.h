// Python bindings of what a user sets about compilation: torch.tpu.precision's stack,
// torch.tpu.compiler.custom_compiler_options' stack and torch.tpu.allow_excess_precision
// (exec/compile_settings.h, aten/precision_policy.h).
#pragma once

#include <pybind11/pybind11.h>

namespace tpu::python {

void bind_compile_settings(pybind11::module_& m);

}  // namespace tpu::python
