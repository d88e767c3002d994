// The tpu trace as a file of its own (Chrome trace JSON, readable by Perfetto and
// chrome://tracing): what TpuProfilerConfig(run_dir=...) asks for, next to PyTorch's own trace.
// Device programs are rows of a process per device; compiles and cache hits are on the host
// thread that caused them.
#pragma once

#include <cstdint>
#include <string>

#include "profiler/profiler_options.h"
#include "profiler/trace_recorder.h"

namespace tpu::profiler {

// Writes the events of `recorded` within [start_ns, end_ns] at the levels of `options` to
// `path` (its directory is created). Returns an error message, empty on success.
std::string write_trace_file(const std::string& path, const Recorded& recorded, int64_t start_ns,
                             int64_t end_ns, const ProfilerOptions& options);

}  // namespace tpu::profiler
