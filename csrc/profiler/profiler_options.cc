#include "profiler/profiler_options.h"

#include <stdexcept>
#include <vector>

namespace tpu::profiler {
namespace {

// Splits at commas outside double quotes.
std::vector<std::string> split_pairs(const std::string& text) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted && c == '\\' && i + 1 < text.size()) {
      out.back() += c;
      out.back() += text[++i];
      continue;
    }
    if (c == '"') quoted = !quoted;
    if (c == ',' && !quoted) {
      out.emplace_back();
      continue;
    }
    out.back() += c;
  }
  return out;
}

// A value as written: a quoted string loses its quotes and escapes.
std::string unquote(const std::string& v) {
  if (v.size() < 2 || v.front() != '"' || v.back() != '"') return v;
  std::string out;
  for (size_t i = 1; i + 1 < v.size(); ++i) {
    if (v[i] == '\\' && i + 2 < v.size()) ++i;
    out += v[i];
  }
  return out;
}

int level(const std::string& key, const std::string& value) {
  try {
    size_t used = 0;
    const int n = std::stoi(value, &used);
    if (used == value.size()) return n;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument("profiler option " + key + " must be an integer, got '" + value + "'");
}

}  // namespace

std::string ProfilerOptions::trace_path(const std::string& host) const {
  std::string dir = run_dir;
  if (!dir.empty() && dir.back() != '/') dir += '/';
  return dir + host + (worker_rank.empty() ? "" : "_" + worker_rank) + ".tpu_trace.json";
}

ProfilerOptions parse_profiler_options(const std::string& text) {
  ProfilerOptions o;
  if (text.empty()) return o;
  for (const std::string& pair : split_pairs(text)) {
    const size_t colon = pair.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = pair.substr(0, colon);
    const std::string value = unquote(pair.substr(colon + 1));
    if (key == "host_tracer_level") o.host_tracer_level = level(key, value);
    else if (key == "device_tracer_level") o.device_tracer_level = level(key, value);
    else if (key == "python_tracer_level") o.python_tracer_level = level(key, value);
    else if (key == "run_dir") o.run_dir = value;
    else if (key == "worker_rank") o.worker_rank = value;
  }
  return o;
}

}  // namespace tpu::profiler
