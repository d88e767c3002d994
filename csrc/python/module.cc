// torch_tpu._C: the Python-facing functions of the runtime, device, memory, RNG, fallback and
// cache layers. The torch.tpu module (torch_tpu/tpu/) is written on top of these.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <c10/util/Exception.h>

#include "aten/fallback.h"
#include "aten/precision_policy.h"
#include "device/allocator.h"
#include "device/current_device.h"
#include "device/event.h"
#include "device/memory_limit.h"
#include "device/generator.h"
#include "cache/disk_cache.h"
#include "exec/executor.h"
#include "exec/fuse_advisor.h"
#include "exec/fused_graphs.h"
#include "exec/program_cache.h"
#include "lowering/registry.h"
#include "python/compiled_graph.h"
#include "python/compile_settings.h"
#include "python/custom_kernels.h"
#include "python/distributed.h"
#include "runtime/launch_queue.h"
#include "runtime/runtime.h"
#include "runtime/transfers.h"

namespace py = pybind11;

namespace tpu::python {
namespace {

py::dict device_info(int index) {
  auto& rt = runtime::Runtime::get();
  const auto& dev = rt.device(index);
  py::dict d;
  d["name"] = dev.kind;
  d["debug_string"] = dev.debug_string;
  d["platform"] = rt.client().platform_name();
  d["platform_version"] = rt.client().platform_version();
  d["plugin"] = rt.client().plugin().path();
  d["pjrt_api_version"] = rt.client().plugin().api_version_string();
  // Facts the plugin reports: the device kind (e.g. "NVIDIA H200", "TPU v5 lite", "cpu") and
  // the memory limit of its allocator, or the host's memory where it reports none.
  d["device_kind"] = dev.kind;
  const runtime::MemoryTotals totals = device::memory_totals(static_cast<c10::DeviceIndex>(index));
  d["total_memory"] = totals.total;
  d["total_memory_source"] = totals.source;
  return d;
}

py::tuple mem_get_info(int index) {
  const runtime::MemoryTotals t = device::memory_totals(static_cast<c10::DeviceIndex>(index));
  return py::make_tuple(t.free, t.total, t.source);
}

py::dict stat_dict(const c10::CachingAllocator::Stat& s) {
  py::dict d;
  d["current"] = s.current;
  d["peak"] = s.peak;
  d["allocated"] = s.allocated;
  d["freed"] = s.freed;
  return d;
}

py::dict memory_stats(int index) {
  auto stats = device::allocator().getDeviceStats(static_cast<c10::DeviceIndex>(index));
  constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  py::dict d;
  d["allocated_bytes"] = stat_dict(stats.allocated_bytes[kAll]);
  d["reserved_bytes"] = stat_dict(stats.reserved_bytes[kAll]);
  d["allocation"] = stat_dict(stats.allocation[kAll]);
  // Where each byte figure came from: "pjrt" (the plugin's statistics) or "allocator".
  const runtime::MemoryFigures f = device::memory_figures(static_cast<c10::DeviceIndex>(index));
  py::dict source;
  source["allocated_bytes.current"] = f.allocated_source;
  source["allocated_bytes.peak"] = f.peak_source;
  source["reserved_bytes.current"] = f.reserved_source;
  d["source"] = source;
  return d;
}

py::dict cache_stats() {
  auto& programs = exec::ProgramCache::get();
  const auto c = programs.executables().stats();
  const auto e = programs.stats();
  const auto f = exec::Executor::get().fused().stats();
  py::dict d;
  d["hits"] = c.hits + e.signature_hits + f.graph_replays;
  d["misses"] = c.misses;
  d["compiles"] = c.compiles;
  d["compile_seconds"] = c.compile_seconds;
  d["entries"] = c.entries;
  d["executions"] = e.executions;
  d["donated_buffers"] = e.donated_buffers;
  const runtime::ReadStats reads = runtime::read_stats();
  d["host_reads"] = reads.reads;
  d["host_reads_in_place"] = reads.in_place;
  d["disk_loads"] = c.disk_loads;
  d["disk_load_seconds"] = c.disk_load_seconds;
  d["disk_writes"] = c.disk.writes;
  d["disk_rejected"] = c.disk.rejected;
  d["disk_host_mismatch"] = c.disk.host_mismatch;
  d["disk_evicted"] = c.disk.evicted;
  d["disk_bytes"] = static_cast<int64_t>(programs.executables().disk().bytes_on_disk());
  d["disk_dir"] = programs.executables().disk().dir();
  d["disk_refused"] = programs.executables().disk().refused();
  d["fused_ops_recorded"] = f.ops_recorded;
  d["fused_graphs_run"] = f.graphs_run;
  d["fused_graph_compiles"] = f.graph_compiles;
  d["fused_graph_replays"] = f.graph_replays;
  d["fused_flushes_by_repeat"] = f.flushes_by_repeat;
  d["fused_flushes_by_size"] = f.flushes_by_size;
  d["fused_split_reads"] = f.split_reads;
  d["collectives_in_graphs"] = f.collectives_recorded;
  d["graphs_with_collectives"] = f.graphs_with_collectives;
  d["fused_patterns_timed"] = f.patterns_timed;
  d["fused_patterns_strict"] = f.patterns_strict;
  d["fused_patterns_pending"] = f.patterns_pending;
  d["fused_ops_run_strictly"] = f.ops_run_strictly;
  return d;
}

std::optional<std::string> runtime_error() {
  try {
    runtime::Runtime::get();
    return std::nullopt;
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
}

}  // namespace
}  // namespace tpu::python

PYBIND11_MODULE(_C, m) {
  using namespace tpu;
  exec::ShapeChurn::set_sink([](const std::string& message) { TORCH_WARN(message); });
  cache::DiskCache::set_warning_sink([](const std::string& message) { TORCH_WARN(message); });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const c10::OutOfMemoryError& e) {
      PyErr_SetString(py::module_::import("torch").attr("OutOfMemoryError").ptr(), e.what_without_backtrace());
    } catch (const c10::IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
    } catch (const c10::TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });

  m.def("_set_default_plugin_path", &runtime::Runtime::set_default_plugin_path);
  m.def("_set_plugin_search_error", &runtime::Runtime::set_plugin_search_error);
  m.def("_configured_plugin_path", &runtime::Runtime::configured_plugin_path);
  m.def("_init", [] { runtime::Runtime::get(); });
  m.def("_is_initialized", &runtime::Runtime::created);
  m.def("_is_in_bad_fork", &runtime::Runtime::in_bad_fork);
  m.def("_runtime_error", &python::runtime_error,
        "None if the PJRT runtime is (or can be) up, else why not");
  m.def("_device_count", &runtime::Runtime::device_count_or_zero);
  m.def("_get_device", [] { return static_cast<int>(device::current_device()); });
  m.def("_set_device", [](int i) { device::set_device(static_cast<c10::DeviceIndex>(i)); });
  m.def("_exchange_device",
        [](int i) { return static_cast<int>(device::exchange_device(static_cast<c10::DeviceIndex>(i))); });
  m.def("_synchronize", [](int i) {
    py::gil_scoped_release release;
    const int device = i < 0 ? device::current_device() : i;
    try {
      runtime::Runtime::get().tracker(device).synchronize();
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception& e) {
      device::raise_device_error(e.what(), device);  // torch.OutOfMemoryError when it is one
    }
  });
  m.def("_set_memory_fraction", &device::set_memory_fraction);
  m.def("_memory_fraction", &device::memory_fraction);
  m.def("_memory_limit", &device::memory_limit);
  m.def("_device_info", &python::device_info);
  m.def("_memory_stats", &python::memory_stats);
  m.def("_mem_get_info", &python::mem_get_info);
  m.def("_conv_allow_tf32", &aten::conv_allows_tf32);
  m.def("_set_conv_allow_tf32", &aten::set_conv_allows_tf32);
  m.def("_reset_peak_memory_stats",
        [](int i) { device::allocator().resetPeakStats(static_cast<c10::DeviceIndex>(i)); });
  m.def("_reset_accumulated_memory_stats",
        [](int i) { device::allocator().resetAccumulatedStats(static_cast<c10::DeviceIndex>(i)); });
  m.def("_empty_cache", [] { device::allocator().emptyCache({0, 0}); });
  m.def("_default_generator", [](int i) {
    const at::Generator& g = device::default_generator(static_cast<c10::DeviceIndex>(i));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(g));
  });
  m.def("_event_elapsed_ms", [](int64_t start, int64_t end) {
    // torch.Event.event_id: the TpuEvent behind a recorded event (0 when not recorded).
    TORCH_CHECK(start != 0 && end != 0, "Both events must be recorded before calculating elapsed time.");
    py::gil_scoped_release release;
    return reinterpret_cast<device::TpuEvent*>(start)->elapsed_ms(*reinterpret_cast<device::TpuEvent*>(end));
  });
  m.def("_fallback_counts", &aten::fallback_counts);
  m.def("_reset_fallback_counts", &aten::reset_fallback_counts);
  m.def("_set_fallback_mode", [](const std::string& mode) {
    TORCH_CHECK(mode == "warn" || mode == "error", "fallback mode must be 'warn' or 'error', got '", mode, "'");
    aten::set_fallback_mode(mode == "error" ? aten::FallbackMode::kError : aten::FallbackMode::kWarn);
  });
  m.def("_get_fallback_mode",
        [] { return aten::fallback_mode() == aten::FallbackMode::kError ? "error" : "warn"; });
  m.def("_compilation_cache_stats", &python::cache_stats);
  m.def("_set_eager_mode", [](int mode) {
    exec::Executor::get();  // installs the deferred graph
    exec::set_eager_mode(static_cast<exec::EagerMode>(mode));
  });
  m.def("_eager_mode", [] { return static_cast<int>(exec::eager_mode()); });
  m.def("_flush_pending", [] { exec::Executor::get().fused().flush(); },
        py::call_guard<py::gil_scoped_release>());  // may launch a program whose ranks meet
  m.def("_pending_ops", [] { return exec::Executor::get().fused().pending_ops(); });
  // torch.tpu.distributed.spmd_safe: +1 entering a region on this thread, -1 leaving it.
  m.def("_spmd_safe_region", [](int delta) { exec::FusedGraphs::spmd_safe_region(delta); });
  m.def("_in_spmd_safe_region", [] { return exec::FusedGraphs::in_spmd_safe_region(); });
  m.def("_dist_cut_collectives", [](bool cut) { exec::FusedGraphs::set_cut_collectives(cut); });
  // Tests: the fuse advisor's settings (exec/fuse_advisor.h); every graph's advisor starts afresh.
  m.def("_configure_fuse_advisor", [](double margin, double min_window_seconds, int strict_iterations,
                                      double max_iteration_seconds) {
    exec::FuseAdvisor::Config& c = exec::FuseAdvisor::defaults();
    c.margin = margin;
    c.min_window_seconds = min_window_seconds;
    c.strict_iterations = strict_iterations;
    c.max_iteration_seconds = max_iteration_seconds;
    exec::Executor::get().fused().reset_advisors();
  }, py::arg("margin") = exec::FuseAdvisor::Config{}.margin,
     py::arg("min_window_seconds") = exec::FuseAdvisor::Config{}.min_window_seconds,
     py::arg("strict_iterations") = exec::FuseAdvisor::Config{}.strict_iterations,
     py::arg("max_iteration_seconds") = exec::FuseAdvisor::Config{}.max_iteration_seconds);
  m.def("_clear_compilation_cache", [](bool disk) {
    exec::ProgramCache::get().clear(disk);
  });
  // Tests: simulates a device fault by releasing the device memory behind a tensor's storage.
  m.def("_test_lose_device_buffer", [](const at::Tensor& t) {
    auto contents = device::storage_of(t).contents();
    if (contents.buffer) contents.buffer->release_memory();
  });
  // Tests: which device buffer a tensor's storage holds now (0: none), to tell shared buffers apart.
  m.def("_test_buffer_address", [](const at::Tensor& t) {
    return reinterpret_cast<uintptr_t>(device::storage_of(t).contents().buffer.get());
  });
  m.def("_launch_stats", [] {
    auto s = runtime::LaunchQueue::get().stats();
    py::dict d;
    d["queued"] = s.queued;
    d["inlined"] = s.inlined;
    const runtime::ExecuteCallStats e = runtime::execute_call_stats();
    d["execute_calls"] = e.calls;
    d["execute_seconds"] = static_cast<double>(e.nanoseconds) * 1e-9;
    return d;
  });
  m.def("_deferred_check_stats", [](int i) {
    // torch._assert_async verdicts of a device (runtime/deferred_checks.h), for tests.
    auto s = runtime::Runtime::get().tracker(i < 0 ? device::current_device() : i).checks().stats();
    py::dict d;
    d["pending"] = s.pending;
    d["evaluated"] = s.evaluated;
    d["failed"] = s.failed;
    return d;
  });
  m.def("_record_last_program", [](bool on) { exec::Executor::get().record_last(on); });
  m.def("_replay_last_raw", [](int n) {
    py::gil_scoped_release release;
    return exec::Executor::get().replay_last_raw(n);
  });
  m.def("_set_shape_churn_limit", [](int n) { exec::ProgramCache::get().churn().set_limit(n); });
  m.def("_shape_churn_limit", [] { return exec::ProgramCache::get().churn().limit(); });
  m.def("_lowerings", &lowering::registered_lowerings);
  python::bind_compiled_graph(m);
  python::bind_compile_settings(m);
  python::bind_distributed(m);
  python::bind_custom_kernels(m);
}
