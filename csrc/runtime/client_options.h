// Which kind of PJRT plugin is loaded, and the PJRT_Client_Create options torch_tpu passes to
// it. Plugins reject options they do not know, so each option goes only to the kind that takes
// it: the XLA CPU plugin gets its device count, the XLA GPU (CUDA) plugin its allocator
// settings, every multi-process plugin its node id and count.
//
// Configuration (environment, read when the runtime is created):
//   TORCH_TPU_PLATFORM=cpu|cuda|tpu       - what the plugin is (default: told by its file name)
//   TORCH_TPU_CPU_DEVICE_COUNT=N          - XLA CPU plugin: number of devices (default 1)
//   TORCH_TPU_GPU_PREALLOCATE=0|1         - GPU: reserve the memory pool up front (default 0)
//   TORCH_TPU_GPU_MEMORY_FRACTION=F       - GPU: share of device memory the pool may use, (0, 1]
//   TORCH_TPU_GPU_ALLOCATOR=NAME          - GPU: default | platform | bfc | cuda_async
//   TORCH_TPU_VISIBLE_DEVICES=0,1,...     - GPU: the device ordinals this process uses
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "pjrt/client.h"

namespace tpu::runtime {

enum class PluginKind { kXlaCpu, kXlaGpu, kOther };

const char* plugin_kind_name(PluginKind kind);

// Reads an environment variable; returns nullptr when it is unset or empty. Tests pass their own.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup process_env();

// The kind of the plugin at `path`: TORCH_TPU_PLATFORM when set (throws std::runtime_error for
// a value that is not a platform), else guessed from the file name ("cpu" -> XLA CPU,
// "cuda"/"gpu" -> XLA GPU, anything else, e.g. libtpu.so -> other).
PluginKind plugin_kind(const std::string& path, const EnvLookup& env);

// The create options for a plugin of `kind`, as process `node_id` of `num_nodes`. Throws
// std::runtime_error naming the variable and the accepted values for a malformed setting.
std::vector<pjrt::NamedOption> client_create_options(PluginKind kind, const EnvLookup& env,
                                                     int node_id, int num_nodes);

}  // namespace tpu::runtime
