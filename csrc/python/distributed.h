// Bindings of tpu_dist (csrc/distributed/): the backend creators torch_tpu.distributed calls.
#pragma once

#include <pybind11/pybind11.h>

namespace tpu::python {

void bind_distributed(pybind11::module_& m);

}  // namespace tpu::python
