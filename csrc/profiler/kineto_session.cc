#include "profiler/kineto_session.h"

#include <algorithm>
#include <limits>
#include <utility>

#include <unistd.h>

#include <kineto/output_base.h>  // ActivityLogger

#include "profiler/trace_file.h"
#include "profiler/trace_recorder.h"

namespace tpu::profiler {
// A metadata value written into the JSON trace unquoted (a number).
struct JsonNumber {
  std::string text;
};
}  // namespace tpu::profiler

// GenericTraceActivity::addMetadata formats its value with fmt, whose compiled part libtorch
// does not export; this specialisation stores a number's text without fmt.
template <>
void libkineto::GenericTraceActivity::addMetadata<tpu::profiler::JsonNumber>(
    const std::string& key, const tpu::profiler::JsonNumber& value) {
  metadataMap_.emplace(key, std::make_pair(value.text, false));
}

namespace tpu::profiler {

namespace {

using libkineto::ActivityType;

JsonNumber number(int64_t v) { return JsonNumber{std::to_string(v)}; }

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The runtime labels whole programs with sentences made for error messages (exec/fused_graph.cc,
// python/compiled_graph.cc); the trace names them briefly.
const char* program_kind(const std::string& label) {
  if (starts_with(label, "a fused graph")) return "fused_graph";
  if (starts_with(label, "a compiled graph")) return "compiled_graph";
  return "op";
}

std::string program_name(const std::string& label) {
  if (starts_with(label, "a fused graph of ")) return label.substr(2);  // "fused graph of N ops"
  if (starts_with(label, "a fused graph")) return "fused graph";
  if (starts_with(label, "a compiled graph")) return "compiled graph";
  return label;
}

// Metadata values are written into the JSON trace as they are.
std::string json_safe(std::string s) {
  for (char& c : s) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = '\'';
  }
  return s;
}

constexpr int64_t kDeviceSortIndex = 0x1000000;  // device rows below the CPU threads

}  // namespace

// ---- TpuActivityProfiler ------------------------------------------------------------------

const std::string& TpuActivityProfiler::name() const {
  static const std::string kName = "torch_tpu";
  return kName;
}

const std::set<ActivityType>& TpuActivityProfiler::availableActivities() const {
  static const std::set<ActivityType> kTypes = {ActivityType::CONCURRENT_KERNEL,
                                                ActivityType::PRIVATEUSE1_RUNTIME};
  return kTypes;
}

std::unique_ptr<libkineto::IActivityProfilerSession> TpuActivityProfiler::configure(
    const std::set<ActivityType>& activity_types, const libkineto::Config& config) {
  ProfilerOptions options;
  std::vector<std::string> errors;
  try {
    options = parse_profiler_options(config.getCustomConfig());
  } catch (const std::exception& e) {
    errors.emplace_back(e.what());
  }
  // ProfilerActivity.PrivateUse1 asks for CONCURRENT_KERNEL (device programs) and
  // PRIVATEUSE1_RUNTIME; ProfilerActivity.CPU alone asks for PRIVATEUSE1_RUNTIME only.
  const bool device = activity_types.count(ActivityType::CONCURRENT_KERNEL) > 0 && options.device_tracer_level > 0;
  const bool runtime = activity_types.count(ActivityType::PRIVATEUSE1_RUNTIME) > 0 && options.host_tracer_level > 0;
  if (!device && !runtime && options.run_dir.empty()) return nullptr;
  return std::make_unique<TpuProfilerSession>(device, runtime, std::move(options), std::move(errors));
}

std::unique_ptr<libkineto::IActivityProfilerSession> TpuActivityProfiler::configure(
    int64_t, int64_t, const std::set<ActivityType>& activity_types, const libkineto::Config& config) {
  return configure(activity_types, config);
}

// ---- TpuProfilerSession -------------------------------------------------------------------

TpuProfilerSession::TpuProfilerSession(bool device_activities, bool runtime_activities,
                                       ProfilerOptions options, std::vector<std::string> errors)
    : device_activities_(device_activities),
      runtime_activities_(runtime_activities),
      options_(std::move(options)),
      errors_(std::move(errors)),
      buffer_(std::make_unique<libkineto::CpuTraceBuffer>()) {
  buffer_->span = libkineto::TraceSpan(0, 0, "tpu");
  buffer_->span.iteration = 0;
  buffer_->gpuOpCount = 0;
}

void TpuProfilerSession::start() {
  TraceRecorder::get().begin(runtime_activities_ && options_.host_tracer_level >= ProfilerOptions::kHostSpansLevel);
  status_ = libkineto::TraceStatus::RECORDING;
}

void TpuProfilerSession::stop() {
  TraceRecorder::get().end();
  status_ = libkineto::TraceStatus::PROCESSING;
}

void TpuProfilerSession::pushCorrelationId(uint64_t id) { TraceRecorder::get().push_correlation(id); }
void TpuProfilerSession::popCorrelationId() { TraceRecorder::get().pop_correlation(); }
// record_function scopes: programs launched directly inside one (a compiled graph called from a
// record_function block) are linked to it.
void TpuProfilerSession::pushUserCorrelationId(uint64_t id) { TraceRecorder::get().push_correlation(id); }
void TpuProfilerSession::popUserCorrelationId() { TraceRecorder::get().pop_correlation(); }

libkineto::GenericTraceActivity& TpuProfilerSession::add(ActivityType type, const std::string& name) {
  buffer_->emplace_activity(buffer_->span, type, name);
  return *buffer_->activities.back();
}

void TpuProfilerSession::processTrace(libkineto::ActivityLogger& logger) {
  processTrace(logger, nullptr, 0, std::numeric_limits<int64_t>::max());
}

void TpuProfilerSession::processTrace(libkineto::ActivityLogger& logger,
                                      libkineto::getLinkedActivityCallback linked_activity,
                                      int64_t start_ns, int64_t end_ns) {
  if (end_ns <= 0) end_ns = std::numeric_limits<int64_t>::max();
  Recorded recorded = TraceRecorder::get().take();
  if (!options_.run_dir.empty()) {
    char host[256] = "host";
    ::gethostname(host, sizeof host - 1);
    const std::string problem = write_trace_file(options_.trace_path(host), recorded, start_ns, end_ns, options_);
    if (!problem.empty()) errors_.push_back(problem);
  }
  auto linked = [&](uint64_t correlation) -> const libkineto::ITraceActivity* {
    if (correlation == 0 || !linked_activity) return nullptr;
    return linked_activity(static_cast<int32_t>(correlation));
  };
  const int32_t pid = libkineto::processId();

  if (device_activities_) {
    // One row per device: each execution spans its run there (from start_ns), and a device runs
    // its programs one after another (profiler/device_timeline.h), so its row is a timeline.
    for (const ExecutionRecord& r : recorded.executions) {
      if (r.done_ns < start_ns || r.launch_ns > end_ns) continue;  // launched in the session
      rows_.insert(r.device);
      const std::string label = r.label ? r.label : "";
      const char* kind = program_kind(label);
      const std::string name =
          std::string(kind) == "op" ? "tpu::op " + label : std::string("tpu::") + kind;
      auto& a = add(ActivityType::CONCURRENT_KERNEL, name);
      a.device = r.device;
      a.resource = 0;
      a.startTime = r.start_ns;
      a.endTime = std::max(r.done_ns, r.start_ns + 1);
      a.id = static_cast<int32_t>(r.correlation);
      a.linked = linked(r.correlation);
      a.addMetadata("device", number(r.device));
      a.addMetadata("stream", number(0));
      a.addMetadata("correlation", number(static_cast<int64_t>(r.correlation)));
      a.addMetadata("queued_ns", number(r.start_ns - r.launch_ns));  // behind earlier programs
      a.addMetadataQuoted("kind", kind);
      a.addMetadataQuoted("program", json_safe(program_name(label)));
      if (r.failed) a.addMetadata("failed", JsonNumber{"true"});
      if (r.launch_id != 0) a.addMetadata("launch_id", number(r.launch_id));
      if (!r.program.empty()) a.addMetadataQuoted("hlo", json_safe(r.program));
      logger.handleActivity(a);
    }
  }

  if (runtime_activities_) {
    // A CPU-side event of the runtime (compile, cache hit) on the thread that caused it.
    auto runtime_event = [&](const std::string& name, int32_t thread, int64_t begin, int64_t end,
                             uint64_t correlation, const std::string& program) -> libkineto::GenericTraceActivity& {
      auto& a = add(ActivityType::PRIVATEUSE1_RUNTIME, name);
      a.device = pid;
      a.resource = thread;
      a.threadId = thread;
      a.startTime = begin;
      a.endTime = end;
      a.id = static_cast<int32_t>(correlation);
      a.linked = linked(correlation);
      a.addMetadataQuoted("program", json_safe(program_name(program)));
      return a;
    };
    for (const CompileRecord& c : recorded.compiles) {
      if (c.end_ns < start_ns || c.start_ns > end_ns) continue;
      auto& a = runtime_event("tpu::compile " + program_name(c.program), c.thread, c.start_ns, c.end_ns,
                              c.correlation, c.program);
      a.addMetadataQuoted("source", c.source);
      logger.handleActivity(a);
    }
    for (const CacheHitRecord& h : recorded.cache_hits) {
      if (h.at_ns < start_ns || h.at_ns > end_ns) continue;
      auto& a = runtime_event("tpu::cache_hit", h.thread, h.at_ns, h.at_ns, h.correlation, h.program);
      a.addMetadataQuoted("tier", h.tier);
      logger.handleActivity(a);
    }
    for (const HostSpanRecord& h : recorded.host_spans) {
      if (h.end_ns < start_ns || h.start_ns > end_ns) continue;
      auto& a = runtime_event(std::string("tpu::") + h.layer, h.thread, h.start_ns, h.end_ns, h.correlation, "");
      a.addMetadataQuoted("layer", h.layer);
      logger.handleActivity(a);
    }
  }
  buffer_->span.startTime = start_ns;
  buffer_->span.endTime = end_ns == std::numeric_limits<int64_t>::max() ? 0 : end_ns;
}

std::unique_ptr<libkineto::DeviceInfo> TpuProfilerSession::getDeviceInfo() {
  // Kineto takes one process description per child profiler: the first device's. Other
  // devices' rows are named by getResourceInfos().
  return std::make_unique<libkineto::DeviceInfo>(
      libkineto::DeviceInfo{0, kDeviceSortIndex, "tpu:0", "TPU 0"});
}

std::vector<libkineto::ResourceInfo> TpuProfilerSession::getResourceInfos() {
  std::vector<libkineto::ResourceInfo> out;
  for (int device : rows_) {
    out.push_back(libkineto::ResourceInfo{0, 0, device, "tpu:" + std::to_string(device) + " programs"});
  }
  return out;
}

std::unique_ptr<libkineto::CpuTraceBuffer> TpuProfilerSession::getTraceBuffer() {
  // The trace keeps the activities alive from here on (the logger points into them).
  return std::move(buffer_);
}

// Kineto creates the profiler when torch.profiler first prepares a trace (or at once, when it
// is running already).
namespace {
const bool g_registered = [] {
  libkineto::api().registerProfilerFactory(
      []() -> std::unique_ptr<libkineto::IActivityProfiler> { return std::make_unique<TpuActivityProfiler>(); });
  return true;
}();
}  // namespace

}  // namespace tpu::profiler
