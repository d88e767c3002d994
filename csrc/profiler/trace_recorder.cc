#include "profiler/trace_recorder.h"

#include <chrono>

#include <kineto/ThreadUtil.h>  // libkineto::systemThreadId: the tid Kineto gives CPU activities

#include "profiler/device_timeline.h"

namespace tpu::profiler {

namespace {

// The correlation ids of the profiled ops open on this thread, innermost last.
struct CorrelationStack {
  uint64_t generation = 0;
  std::vector<uint64_t> ids;
};
thread_local CorrelationStack t_correlations;

// Installs the recorder as the runtime's sink when the extension loads, before any op runs.
const bool g_installed = [] {
  detail::g_sink = &TraceRecorder::get();
  return true;
}();

}  // namespace

TraceRecorder& TraceRecorder::get() {
  static TraceRecorder* recorder = new TraceRecorder();  // never destroyed: late callbacks
  return *recorder;
}

void TraceRecorder::begin(bool host_spans) {
  std::lock_guard<std::mutex> lock(mu_);
  recorded_ = Recorded{};
  in_flight_ = 0;
  collecting_ = true;
  generation_.fetch_add(1);
  detail::g_host_spans.store(host_spans, std::memory_order_relaxed);
  detail::g_tracing.store(true, std::memory_order_relaxed);
}

void TraceRecorder::end() {
  detail::g_host_spans.store(false, std::memory_order_relaxed);
  detail::g_tracing.store(false, std::memory_order_relaxed);
  std::unique_lock<std::mutex> lock(mu_);
  // Bounded: work launched in the session but never waited for may still be running.
  settled_.wait_for(lock, std::chrono::seconds(2), [&] { return in_flight_ <= 0; });
  collecting_ = false;
  in_flight_ = 0;
}

void TraceRecorder::execution_launched() {
  std::lock_guard<std::mutex> lock(mu_);
  if (collecting_) ++in_flight_;
}

void TraceRecorder::execution_dropped() {
  std::lock_guard<std::mutex> lock(mu_);
  if (collecting_ && --in_flight_ <= 0) settled_.notify_all();
}

Recorded TraceRecorder::take() {
  std::lock_guard<std::mutex> lock(mu_);
  Recorded out = std::move(recorded_);
  recorded_ = Recorded{};
  place_on_devices(out.executions);
  return out;
}

void TraceRecorder::push_correlation(uint64_t id) {
  CorrelationStack& s = t_correlations;
  const uint64_t gen = generation_.load();
  if (s.generation != gen) {
    s.ids.clear();
    s.generation = gen;
  }
  s.ids.push_back(id);
}

void TraceRecorder::pop_correlation() {
  CorrelationStack& s = t_correlations;
  if (s.generation == generation_.load() && !s.ids.empty()) s.ids.pop_back();
}

uint64_t TraceRecorder::current_correlation() {
  const CorrelationStack& s = t_correlations;
  if (s.generation != generation_.load() || s.ids.empty()) return 0;
  return s.ids.back();
}

void TraceRecorder::execution(const ExecutionRecord& record) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!collecting_) return;
  recorded_.executions.push_back(record);
  if (--in_flight_ <= 0) settled_.notify_all();
}

void TraceRecorder::compile(const std::string& program, const char* source, int64_t start_ns,
                            int64_t end_ns) {
  CompileRecord r{program, source, start_ns, end_ns, current_correlation(),
                  libkineto::systemThreadId()};
  std::lock_guard<std::mutex> lock(mu_);
  if (collecting_) recorded_.compiles.push_back(std::move(r));
}

void TraceRecorder::cache_hit(const std::string& program, const char* tier) {
  CacheHitRecord r{program, tier, now_ns(), current_correlation(), libkineto::systemThreadId()};
  std::lock_guard<std::mutex> lock(mu_);
  if (collecting_) recorded_.cache_hits.push_back(std::move(r));
}

void TraceRecorder::host_span(const char* layer, int64_t start_ns, int64_t end_ns, uint64_t correlation) {
  HostSpanRecord r{layer, start_ns, end_ns, correlation ? correlation : current_correlation(),
                   libkineto::systemThreadId()};
  std::lock_guard<std::mutex> lock(mu_);
  if (collecting_) recorded_.host_spans.push_back(r);
}

}  // namespace tpu::profiler
