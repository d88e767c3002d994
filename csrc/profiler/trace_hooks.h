// What the torch-free runtime tells a profiler: program executions (launch to completion),
// compiles, compilation-cache hits and the host time of each layer of the stack (host spans).
// The Kineto integration in this folder implements TraceSink; the core only includes this header.
//
// Cost when no profiling session is active: one relaxed atomic load (tracing()) at each
// launch, compile and cache lookup - no lock, no allocation, no clock read.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace tpu::profiler {

// Nanoseconds since the Unix epoch (Kineto's clock for trace activities).
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One program execution on a device, as the runtime observed it.
struct ExecutionRecord {
  const char* label = "";    // the op or program (a string with static lifetime)
  int device = 0;
  uint64_t correlation = 0;  // the profiled CPU op that launched it; 0 when none
  int64_t launch_ns = 0;     // PJRT execute called
  int64_t done_ns = 0;       // its completion event became ready
  // When the device began running it: set when a trace is taken (profiler/device_timeline.h).
  int64_t start_ns = 0;
  bool failed = false;
  // A program with collectives: the id all ranks' parts of the launch share (0: none).
  int launch_id = 0;
  std::string program;  // the executable's name (the dumped text's file name); empty for none
};

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // The profiled CPU op running on the calling thread (0 when none).
  virtual uint64_t current_correlation() = 0;
  // An execution was launched while tracing; its execution() (or execution_dropped()) follows.
  virtual void execution_launched() = 0;
  virtual void execution_dropped() = 0;
  // Called from any thread, possibly a PJRT plugin thread.
  virtual void execution(const ExecutionRecord& record) = 0;
  // On the thread that compiled `program` (or loaded it from the disk tier: `source`).
  virtual void compile(const std::string& program, const char* source, int64_t start_ns,
                       int64_t end_ns) = 0;
  // On the thread whose lookup found `program` compiled already; `tier` says where.
  virtual void cache_hit(const std::string& program, const char* tier) = 0;
  // Host work of one layer of the stack on the calling thread (`layer`: a string with static
  // lifetime, see HostSpan). `correlation` 0: the profiled op running on this thread now.
  virtual void host_span(const char* layer, int64_t start_ns, int64_t end_ns, uint64_t correlation) = 0;
};

namespace detail {
inline std::atomic<bool> g_tracing{false};
inline std::atomic<bool> g_host_spans{false};
inline TraceSink* g_sink = nullptr;  // installed once, when the extension loads
}  // namespace detail

// True only while a profiling session collects device activity.
inline bool tracing() { return detail::g_tracing.load(std::memory_order_relaxed); }
// True while the session also collects host spans (TpuProfilerConfig(host_tracer_level=3)).
inline bool host_spans() { return detail::g_host_spans.load(std::memory_order_relaxed); }
// Valid whenever tracing() returned true.
inline TraceSink& sink() { return *detail::g_sink; }

// Reports its scope as a host span of `layer` when a profiling session was collecting host spans
// at both ends; otherwise costs the one relaxed load of host_spans(). The layers, outermost first:
// "kernel" (a tpu kernel building its call and output tensors), "executor" (signature, program
// lookup, promised outputs, push to the launch queue), "record" (Fused Eager recording an op),
// "flush" (a fused graph closed: key, program lookup, bind, launch), "replay" (a compiled graph
// run), "wait" (the host waiting for the device), "pjrt_execute" (PJRT's Execute called on the
// thread that issues the program), and for queued launches "launcher_execute" (PJRT's Execute on
// the launcher thread) and "launch_queue" (the launch waiting in the queue: latency, no work).
class HostSpan {
 public:
  explicit HostSpan(const char* layer) : layer_(layer), start_ns_(host_spans() ? now_ns() : 0) {}
  ~HostSpan() {
    if (start_ns_ != 0 && host_spans()) sink().host_span(layer_, start_ns_, now_ns(), 0);
  }
  HostSpan(HostSpan&& other) noexcept : layer_(other.layer_), start_ns_(other.start_ns_) { other.start_ns_ = 0; }
  HostSpan(const HostSpan&) = delete;
  HostSpan& operator=(const HostSpan&) = delete;
  HostSpan& operator=(HostSpan&&) = delete;

 private:
  const char* layer_;
  int64_t start_ns_;
};

}  // namespace tpu::profiler
