// Bindings of torch.compile's captured graphs (csrc/compile/): torch_tpu._C._CompiledGraph,
// _capture_begin and _capture_end.
#pragma once

#include <pybind11/pybind11.h>

namespace tpu::python {

void bind_compiled_graph(pybind11::module_& m);

}  // namespace tpu::python
