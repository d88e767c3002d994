// The process-wide PJRT runtime: which plugin is loaded, its client, its devices, and one
// WorkTracker per device. Created on first use; a failure to load is remembered and re-raised
// with the same message (path, reason, fix) on every later use.
//
// Configuration (read once, at creation):
//   TORCH_TPU_PJRT_PLUGIN=/path/to/plugin.so  - the PJRT plugin to load; default: the XLA CPU
//                                               plugin of the installed xla-cpu-pjrt package
//   TORCH_TPU_PLATFORM, TORCH_TPU_CPU_DEVICE_COUNT, TORCH_TPU_GPU_*   - client options, see
//                                               runtime/client_options.h
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pjrt/client.h"
#include "pjrt/plugin.h"
#include "runtime/work_tracker.h"

namespace tpu::runtime {

class Runtime {
 public:
  // The runtime, creating it on first call. Throws pjrt::PluginError or std::runtime_error.
  static Runtime& get();
  // Number of devices, or 0 when the runtime cannot be created (never throws).
  static int device_count_or_zero() noexcept;
  static bool created() noexcept;
  // True in a process forked after its parent created the runtime: the parent's PJRT client
  // (its locks and threads) cannot be used there, so get() raises instead of hanging.
  static bool in_bad_fork() noexcept;
  // The plugin used when TORCH_TPU_PJRT_PLUGIN is not set (found by the Python package).
  static void set_default_plugin_path(const std::string& path);
  static std::string default_plugin_path();
  // The error to raise when there is no default plugin (the Python search's message naming
  // what it looked for); empty: the generic one.
  static void set_plugin_search_error(const std::string& message);
  // The path that will be (or was) loaded.
  static std::string configured_plugin_path();
  // Whether the configured plugin runs collectives across processes (every plugin but XLA's CPU
  // plugin, whose collectives join only the devices of one process).
  static bool configured_plugin_spans_processes();
  // A multi-process run: the client will be created as process `node_id` of `num_nodes`, finding
  // the others through `store` (PJRT's key-value callbacks). Must come before the runtime is
  // created (throws std::logic_error otherwise); ignored for the XLA CPU plugin.
  static void join_processes(int node_id, int num_nodes, std::shared_ptr<pjrt::KeyValueStore> store);

  const pjrt::Client& client() const { return *client_; }
  int device_count() const { return static_cast<int>(client_->devices().size()); }
  // Throws std::out_of_range with a readable message for a bad index.
  const pjrt::DeviceInfo& device(int index) const;
  WorkTracker& tracker(int device);
  // A short identity of the plugin for cache keys and messages: "<platform> <version> (PJRT x.y)".
  const std::string& identity() const { return identity_; }
  // The host kernels (host_kernels/registry.h) registered with the plugin: the CPU plugin's.
  const std::vector<std::string>& host_kernels() const { return host_kernels_; }
  // True when device buffers live in this process's memory (the XLA CPU plugin): a ready
  // buffer can be read in place (runtime/transfers.h).
  bool device_memory_is_host() const { return device_memory_is_host_; }
  bool has_host_kernel(const char* name) const {
    for (const std::string& k : host_kernels_) if (k == name) return true;
    return false;
  }

 private:
  Runtime() = default;
  std::unique_ptr<pjrt::Client> client_;
  std::vector<std::unique_ptr<WorkTracker>> trackers_;
  std::string identity_;
  std::vector<std::string> host_kernels_;
  bool device_memory_is_host_ = false;
};

// Validates a device index against the runtime, with a message naming the valid range.
void check_device_index(int index);

}  // namespace tpu::runtime
