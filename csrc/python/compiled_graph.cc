#include "python/compiled_graph.h"

#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <vector>

#include "compile/capture.h"
#include "compile/compiled_graph.h"
#include "exec/background_compiles.h"
#include "pjrt/buffer.h"
#include "runtime/launch_queue.h"

namespace py = pybind11;

namespace tpu::python {
namespace {

// _CompiledGraph.run(tensors) -> list of tensors, or None when the layout differs. A replay is
// on the hot path of every compiled call, so the lists go to and from Python through the
// CPython API directly (no pybind casters, no per-item type lookups).
py::object run_graph(const compile::CompiledGraph& graph, py::handle tensors) {
  PyObject* seq = PySequence_Fast(tensors.ptr(), "_CompiledGraph.run expects a list of tensors");
  if (seq == nullptr) throw py::error_already_set();
  py::object owned = py::reinterpret_steal<py::object>(seq);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  std::vector<at::Tensor> inputs;
  inputs.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!THPVariable_Check(items[i])) {
      // TypeError, as pybind's caster raised: the Python runner then splits non-tensor arguments.
      throw py::type_error("_CompiledGraph.run: item " + std::to_string(i) + " is a " +
                           Py_TYPE(items[i])->tp_name + ", not a tensor");
    }
    inputs.push_back(THPVariable_Unpack(items[i]));
  }
  std::optional<std::vector<at::Tensor>> out;
  if (graph.has_collectives()) {
    py::gil_scoped_release release;  // the ranks' threads meet before launching
    out = graph.run(inputs);
  } else {
    out = graph.run(inputs);
  }
  if (!out) return py::none();
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(out->size()));
  if (list == nullptr) throw py::error_already_set();
  py::object result = py::reinterpret_steal<py::object>(list);
  for (size_t k = 0; k < out->size(); ++k) {
    PyObject* t = THPVariable_Wrap(std::move((*out)[k]));
    if (t == nullptr) throw py::error_already_set();
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(k), t);  // steals the new reference
  }
  return result;
}

}  // namespace

void bind_compiled_graph(py::module_& m) {
  py::class_<compile::CompiledGraph>(m, "_CompiledGraph")
      .def_property_readonly("replayable", &compile::CompiledGraph::replayable)
      .def_property_readonly("reason", &compile::CompiledGraph::reason)
      .def("run", &run_graph, py::arg("tensors"));
  m.def("_capture_begin", &compile::capture_begin, py::arg("bake"), py::arg("device") = -1);
  // A capture holding collectives runs a program whose ranks' threads meet: without the GIL.
  m.def("_capture_end", [](const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
    if (!compile::capture_holds_collectives()) return compile::capture_end(inputs, outputs);
    py::gil_scoped_release release;
    return compile::capture_end(inputs, outputs);
  });
  py::class_<compile::BackgroundProgram>(m, "_BackgroundProgram")
      .def_property_readonly("state", &compile::BackgroundProgram::state)
      .def("wait", &compile::BackgroundProgram::wait, py::call_guard<py::gil_scoped_release>());
  m.def("_capture_end_in_background", &compile::capture_end_in_background);
  m.def("_wait_background_compiles", [] {
    py::gil_scoped_release release;
    exec::BackgroundCompiles::get().wait_idle();
  });
  // For benchmarks/compile_replay.py: nanoseconds this thread spent inside PJRT Execute and
  // PJRT_Buffer_Destroy, and replays' waits for queued launches, so far (one cheap call).
  m.def("_replay_host_stats", [] {
    return py::make_tuple(runtime::execute_ns_on_this_thread(),
                          pjrt::destroy_call_stats_on_this_thread().nanoseconds, compile::launch_wait_ns());
  });
}

}  // namespace tpu::python
