#include "profiler/trace_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

namespace tpu::profiler {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string micros(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / 1e3);
  return buf;
}

// One complete ("X") event.
std::string event(const std::string& name, const std::string& cat, int64_t pid, int64_t tid,
                  int64_t begin_ns, int64_t end_ns, const std::string& args) {
  return "{\"name\":" + json_string(name) + ",\"cat\":" + json_string(cat) + ",\"ph\":\"X\",\"pid\":" +
         std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"ts\":" + micros(begin_ns) +
         ",\"dur\":" + micros(std::max<int64_t>(end_ns - begin_ns, 0)) + ",\"args\":{" + args + "}}";
}

std::string process_name(int64_t pid, const std::string& name) {
  return "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
         ",\"args\":{\"name\":" + json_string(name) + "}}";
}

constexpr int64_t kDevicePidBase = 1 << 24;  // device rows apart from the host's pid

}  // namespace

std::string write_trace_file(const std::string& path, const Recorded& recorded, int64_t start_ns,
                             int64_t end_ns, const ProfilerOptions& options) {
  std::error_code ec;
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  if (ec) return "cannot create the profiler run_dir " + target.parent_path().string() + ": " + ec.message();
  std::ofstream out(path, std::ios::trunc);
  if (!out) return "cannot write the tpu trace to " + path;

  std::vector<std::string> events;
  std::set<int> devices;
  if (options.device_tracer_level > 0) {
    for (const ExecutionRecord& r : recorded.executions) {
      if (r.done_ns < start_ns || r.launch_ns > end_ns) continue;  // launched in the session
      devices.insert(r.device);
      events.push_back(event(r.label ? r.label : "program", "tpu_program", kDevicePidBase + r.device, 0,
                             r.start_ns, r.done_ns,
                             "\"device\":" + std::to_string(r.device) + (r.failed ? ",\"failed\":true" : "") +
                                 (r.launch_id != 0 ? ",\"launch_id\":" + std::to_string(r.launch_id) : "") +
                                 (r.program.empty() ? "" : ",\"hlo\":" + json_string(r.program))));
    }
  }
  const int64_t host = static_cast<int64_t>(::getpid());
  if (options.host_tracer_level > 0) {
    for (const CompileRecord& c : recorded.compiles) {
      if (c.end_ns < start_ns || c.start_ns > end_ns) continue;
      events.push_back(event("tpu::compile " + c.program, "tpu_runtime", host, c.thread, c.start_ns, c.end_ns,
                             "\"source\":" + json_string(c.source)));
    }
    for (const CacheHitRecord& h : recorded.cache_hits) {
      if (h.at_ns < start_ns || h.at_ns > end_ns) continue;
      events.push_back(event("tpu::cache_hit " + h.program, "tpu_runtime", host, h.thread, h.at_ns, h.at_ns,
                             "\"tier\":" + json_string(h.tier)));
    }
    for (const HostSpanRecord& h : recorded.host_spans) {
      if (h.end_ns < start_ns || h.start_ns > end_ns) continue;
      events.push_back(event(std::string("tpu::") + h.layer, "tpu_host", host, h.thread, h.start_ns, h.end_ns,
                             "\"layer\":" + json_string(h.layer)));
    }
  }
  for (const int d : devices) events.push_back(process_name(kDevicePidBase + d, "tpu:" + std::to_string(d)));

  out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  for (size_t i = 0; i < events.size(); ++i) out << (i ? ",\n" : "\n") << events[i];
  out << "\n]}\n";
  out.close();
  return out ? "" : "cannot write the tpu trace to " + path;
}

}  // namespace tpu::profiler
