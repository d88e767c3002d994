// What torch.tpu.profiler.TpuProfilerConfig asks of the tpu trace. torch.profiler hands the
// config to Kineto as one string (`_ExperimentalConfig(custom_profiler_config=...)`, reaching the
// session as Config::getCustomConfig()): comma-separated `key:value` pairs, string values quoted
// with backslash escapes. Unknown keys are ignored here (the Python class checks them).
#pragma once

#include <string>

namespace tpu::profiler {

struct ProfilerOptions {
  // 0: no runtime events; 1-2: compiles and cache hits; 3: also the host time of each layer of
  // the stack (trace_hooks.h, HostSpan) - what `python -m torch_tpu.bench host` reads.
  int host_tracer_level = 2;
  static constexpr int kHostSpansLevel = 3;
  int device_tracer_level = 1;  // 0: no device activities (program executions)
  int python_tracer_level = 0;  // accepted; Python tracing is torch.profiler's with_stack
  std::string run_dir;          // when set, the tpu trace is also written there as a file
  std::string worker_rank;      // suffix of that file's name

  // The file the trace goes to in run_dir: <run_dir>/<host>[_<rank>].tpu_trace.json.
  std::string trace_path(const std::string& host) const;
};

// Parses a custom config string (empty: the defaults). Throws std::invalid_argument for a
// level that is not an integer.
ProfilerOptions parse_profiler_options(const std::string& text);

}  // namespace tpu::profiler
