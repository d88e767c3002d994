#include "python/compiled_graph.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "compile/capture.h"
#include "compile/compiled_graph.h"
#include "pjrt/buffer.h"
#include "runtime/launch_queue.h"

namespace py = pybind11;

namespace tpu::python {

void bind_compiled_graph(py::module_& m) {
  py::class_<compile::CompiledGraph>(m, "_CompiledGraph")
      .def_property_readonly("replayable", &compile::CompiledGraph::replayable)
      .def_property_readonly("reason", &compile::CompiledGraph::reason)
      .def("run", &compile::CompiledGraph::run);
  m.def("_capture_begin", &compile::capture_begin);
  m.def("_capture_end", &compile::capture_end);
  // For benchmarks/compile_replay.py: nanoseconds this thread spent inside PJRT Execute and
  // PJRT_Buffer_Destroy, and replays' waits for queued launches, so far (one cheap call).
  m.def("_replay_host_stats", [] {
    return py::make_tuple(runtime::execute_ns_on_this_thread(),
                          pjrt::destroy_call_stats_on_this_thread().nanoseconds, compile::launch_wait_ns());
  });
}

}  // namespace tpu::python
