#include "python/compiled_graph.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "compile/capture.h"
#include "compile/compiled_graph.h"

namespace py = pybind11;

namespace tpu::python {

void bind_compiled_graph(py::module_& m) {
  py::class_<compile::CompiledGraph>(m, "_CompiledGraph")
      .def_property_readonly("replayable", &compile::CompiledGraph::replayable)
      .def_property_readonly("reason", &compile::CompiledGraph::reason)
      .def("run", &compile::CompiledGraph::run);
  m.def("_capture_begin", &compile::capture_begin);
  m.def("_capture_end", &compile::capture_end);
}

}  // namespace tpu::python
