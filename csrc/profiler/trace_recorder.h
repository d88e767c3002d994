// The TraceSink the runtime reports to (profiler/trace_hooks.h): it collects executions,
// compiles and cache hits while a Kineto session (profiler/kineto_session.h) is recording, and
// keeps, per thread, the correlation id of the profiled CPU op running there (Kineto pushes
// and pops it around every op).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "profiler/trace_hooks.h"

namespace tpu::profiler {

struct CompileRecord {
  std::string program;
  const char* source = "";
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t correlation = 0;
  int32_t thread = 0;
};

struct CacheHitRecord {
  std::string program;
  const char* tier = "";
  int64_t at_ns = 0;
  uint64_t correlation = 0;
  int32_t thread = 0;
};

struct HostSpanRecord {
  const char* layer = "";
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t correlation = 0;
  int32_t thread = 0;
};

struct Recorded {
  std::vector<ExecutionRecord> executions;
  std::vector<CompileRecord> compiles;
  std::vector<CacheHitRecord> cache_hits;
  std::vector<HostSpanRecord> host_spans;
};

class TraceRecorder final : public TraceSink {
 public:
  static TraceRecorder& get();

  // Starts collecting (what an earlier session left is dropped) and turns the runtime's hooks on;
  // `host_spans`: also the per-layer host spans (trace_hooks.h, HostSpan).
  void begin(bool host_spans = false);
  // Waits (bounded) for the completions of executions launched while collecting - torch.profiler
  // synchronizes the device just before, but a completion callback may still be on its way -
  // then turns the hooks off; reports arriving later are dropped.
  void end();
  // What was collected since begin(), each execution's start on its device set
  // (profiler/device_timeline.h).
  Recorded take();

  void push_correlation(uint64_t id);
  void pop_correlation();

  uint64_t current_correlation() override;
  void execution_launched() override;
  void execution_dropped() override;
  void execution(const ExecutionRecord& record) override;
  void compile(const std::string& program, const char* source, int64_t start_ns,
               int64_t end_ns) override;
  void cache_hit(const std::string& program, const char* tier) override;
  void host_span(const char* layer, int64_t start_ns, int64_t end_ns, uint64_t correlation) override;

 private:
  TraceRecorder() = default;

  std::mutex mu_;
  std::condition_variable settled_;
  int64_t in_flight_ = 0;  // launched while collecting, completion not reported yet
  bool collecting_ = false;
  Recorded recorded_;
  // Bumped by begin(): correlation stacks left over from an earlier session are ignored.
  std::atomic<uint64_t> generation_{1};
};

}  // namespace tpu::profiler
