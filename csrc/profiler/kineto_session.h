// torch.profiler support for the tpu device: a Kineto child profiler. PyTorch's profiler
// (activities=[CPU, PrivateUse1]) configures it, starts and stops it around the profiled region,
// and then asks it for its activities:
//
//   * every program execution (a Strict per-op program, a Fused Eager graph, a compiled graph)
//     as a device activity (CONCURRENT_KERNEL, which PyTorch attributes to PrivateUse1) on the
//     row of its device, from the PJRT execute call to its completion event, linked to the CPU
//     op that launched it (so key_averages() shows it as that op's device time);
//   * compiles ("tpu::compile <program>") and compilation-cache hits ("tpu::cache_hit") as
//     CPU-side runtime activities (PRIVATEUSE1_RUNTIME) on the thread that looked the program up.
//
// torch.tpu.profiler.TpuProfilerConfig (profiler/profiler_options.h) turns either kind off
// (device_tracer_level / host_tracer_level 0) and, with run_dir, also writes the tpu trace to a
// file there (profiler/trace_file.h).
//
// The runtime reports to profiler::TraceRecorder only between start() and stop().
#pragma once

#include <kineto/libkineto.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "profiler/profiler_options.h"

namespace tpu::profiler {

class TpuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override;
  const std::set<libkineto::ActivityType>& availableActivities() const override;
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types, const libkineto::Config& config) override;
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t ts_ms, int64_t duration_ms, const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override;
};

class TpuProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  TpuProfilerSession(bool device_activities, bool runtime_activities, ProfilerOptions options,
                     std::vector<std::string> errors);

  void start() override;
  void stop() override;
  std::vector<std::string> errors() override { return errors_; }
  void processTrace(libkineto::ActivityLogger& logger) override;
  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t start_ns,
                    int64_t end_ns) override;
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override;
  std::vector<libkineto::ResourceInfo> getResourceInfos() override;
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override;

  void pushCorrelationId(uint64_t id) override;
  void popCorrelationId() override;
  void pushUserCorrelationId(uint64_t id) override;
  void popUserCorrelationId() override;

 private:
  libkineto::GenericTraceActivity& add(libkineto::ActivityType type, const std::string& name);

  bool device_activities_;
  bool runtime_activities_;
  ProfilerOptions options_;
  std::vector<std::string> errors_;
  // Owns the activities handed to the logger (Kineto keeps pointers to them) until
  // getTraceBuffer() passes it on to the trace.
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  // Devices whose rows (one each) device activities were placed on.
  std::set<int> rows_;
};

}  // namespace tpu::profiler
