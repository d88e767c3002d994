#include "python/distributed.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "distributed/device_backend.h"
#include "distributed/host_backend.h"
#include "distributed/store_key_value.h"
#include "distributed/store_rendezvous.h"
#include "runtime/blocking_wait.h"
#include "runtime/runtime.h"

namespace py = pybind11;

namespace tpu::python {

namespace {

// Ranks as threads: a rank waiting for its peers releases the GIL they may need to arrive.
void* release_gil_if_held() { return (Py_IsInitialized() && PyGILState_Check()) ? PyEval_SaveThread() : nullptr; }
void restore_gil(void* state) { PyEval_RestoreThread(static_cast<PyThreadState*>(state)); }

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

}  // namespace

void bind_distributed(py::module_& m) {
  runtime::set_blocking_wait_hooks({&release_gil_if_held, &restore_gil});
  // The backend types are torch's: import them before any Backend crosses into Python.
  py::module_::import("torch.distributed");

  m.def("_dist_host_backend",
        [](int rank, int size, double timeout_s, c10d::Backend* gloo,
           const c10::intrusive_ptr<c10d::Store>& world_store, std::vector<int64_t> global_ranks, bool check) {
          return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<distributed::HostBackend>(
              rank, size, millis(timeout_s), c10::intrusive_ptr<c10d::Backend>::reclaim_copy(gloo),
              world_store, std::move(global_ranks), check));
        },
        py::call_guard<py::gil_scoped_release>());
  // `store`: None for ranks that are all threads of this process (they meet in memory), else
  // the group's store, through which ranks in other processes meet.
  m.def("_dist_device_backend",
        [](int rank, int size, double timeout_s, int device, std::vector<int64_t> devices, std::string token,
           std::optional<c10::intrusive_ptr<c10d::Store>> store) {
          distributed::DeviceBackend::RendezvousFactory meet;
          if (store) {
            meet = [s = *store](const std::string& t, int n) -> std::shared_ptr<runtime::Rendezvous> {
              return std::make_shared<distributed::StoreRendezvous>(s, t, n);
            };
          } else {
            meet = [](const std::string& t, int n) -> std::shared_ptr<runtime::Rendezvous> {
              return runtime::InProcessRendezvous::shared(t, n);
            };
          }
          return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<distributed::DeviceBackend>(
              rank, size, millis(timeout_s), device, std::move(devices), std::move(token), std::move(meet)));
        },
        py::call_guard<py::gil_scoped_release>());
  m.def("_dist_collective_counts", [](int device) {
    const auto c = distributed::DeviceBackend::counts(device);
    py::dict d;
    d["launched"] = c.launched;
    d["recorded"] = c.recorded;
    return d;
  }, py::arg("device"));
  m.def("_dist_transport", [](c10d::Backend* backend) -> std::string {
    auto* b = dynamic_cast<distributed::TpuBackend*>(backend);
    return b == nullptr ? "" : b->transport();
  });
  m.def("_dist_abandon", [](c10d::Backend* backend, const std::string& why) {
    if (auto* b = dynamic_cast<distributed::DeviceBackend*>(backend)) b->abandon(why);
  });
  m.def("_dist_host_timings", [](c10d::Backend* backend) {
    auto* b = dynamic_cast<distributed::HostBackend*>(backend);
    TORCH_CHECK(b != nullptr, "not a tpu_dist host-transport backend");
    const auto t = b->timings();
    py::dict d;
    d["waiting_for_device"] = t.waiting_for_device;
    d["to_host"] = t.to_host;
    d["gloo"] = t.gloo;
    d["to_device"] = t.to_device;
    d["jobs"] = t.jobs;
    return d;
  });
  m.def("_device_global_id", [](int index) { return runtime::Runtime::get().device(index).id; });
  // The device's integer attributes (a TPU's "coords", "core_on_chip", "slice_index"; none on CPU).
  m.def("_device_int_attributes", [](int index) { return runtime::Runtime::get().device(index).int_attributes; });
  m.def("_plugin_spans_processes", &runtime::Runtime::configured_plugin_spans_processes);
  m.def("_dist_join_processes", [](const c10::intrusive_ptr<c10d::Store>& store, int node_id, int num_nodes) {
    runtime::Runtime::join_processes(node_id, num_nodes, std::make_shared<distributed::StoreKeyValue>(store));
  });
}

}  // namespace tpu::python
