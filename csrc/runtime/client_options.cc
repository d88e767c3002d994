#include "runtime/client_options.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>

namespace tpu::runtime {

namespace {

[[noreturn]] void bad_setting(const char* name, const char* value, const std::string& fix) {
  throw std::runtime_error(std::string(name) + "='" + value + "' is not valid. Fix: " + fix);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

int cpu_device_count(const EnvLookup& env) {
  const char* v = env("TORCH_TPU_CPU_DEVICE_COUNT");
  if (v == nullptr) return 1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1 || n > 1024) {
    throw std::runtime_error(std::string("TORCH_TPU_CPU_DEVICE_COUNT='") + v +
                             "' is not a device count. Fix: set it to an integer from 1 to 1024, "
                             "or unset it (default 1).");
  }
  return static_cast<int>(n);
}

bool parse_bool(const char* name, const char* v) {
  const std::string s = lower(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  bad_setting(name, v, "set it to 1 or 0 (true/false), or unset it");
}

float parse_fraction(const char* name, const char* v) {
  char* end = nullptr;
  errno = 0;
  const double f = std::strtod(v, &end);
  if (end == v || *end != '\0' || errno != 0 || !(f > 0.0 && f <= 1.0)) {
    bad_setting(name, v, "set it to a number in (0, 1], e.g. 0.75, or unset it");
  }
  return static_cast<float>(f);
}

std::vector<int64_t> parse_device_list(const char* name, const char* v) {
  std::vector<int64_t> ids;
  const std::string s = v;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    const std::string item = s.substr(start, comma - start);
    char* end = nullptr;
    const long id = item.empty() ? -1 : std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || id < 0 || id > 4096) {
      bad_setting(name, v, "set it to comma-separated device ordinals, e.g. 0,1, or unset it");
    }
    for (int64_t seen : ids) {
      if (seen == id) bad_setting(name, v, "list each device ordinal once");
    }
    ids.push_back(id);
    start = comma + 1;
  }
  return ids;
}

void add_gpu_options(const EnvLookup& env, std::vector<pjrt::NamedOption>& out) {
  // Off by default: a framework sharing the GPU (or a second process) should not find the
  // whole device reserved by an idle pool. The pool still grows on demand.
  const char* pre = env("TORCH_TPU_GPU_PREALLOCATE");
  out.push_back(pjrt::NamedOption::boolean(
      "preallocate", pre != nullptr && parse_bool("TORCH_TPU_GPU_PREALLOCATE", pre)));
  if (const char* f = env("TORCH_TPU_GPU_MEMORY_FRACTION")) {
    out.push_back(pjrt::NamedOption::floating("memory_fraction",
                                              parse_fraction("TORCH_TPU_GPU_MEMORY_FRACTION", f)));
  }
  if (const char* a = env("TORCH_TPU_GPU_ALLOCATOR")) {
    const std::string name = lower(a);
    if (name != "default" && name != "platform" && name != "bfc" && name != "cuda_async") {
      bad_setting("TORCH_TPU_GPU_ALLOCATOR", a,
                  "use one of default, platform, bfc, cuda_async, or unset it");
    }
    out.push_back(pjrt::NamedOption::string("allocator", name));
  }
  if (const char* d = env("TORCH_TPU_VISIBLE_DEVICES")) {
    out.push_back(pjrt::NamedOption::int64_list(
        "visible_devices", parse_device_list("TORCH_TPU_VISIBLE_DEVICES", d)));
  }
}

}  // namespace

const char* plugin_kind_name(PluginKind kind) {
  switch (kind) {
    case PluginKind::kXlaCpu: return "cpu";
    case PluginKind::kXlaGpu: return "cuda";
    case PluginKind::kOther: return "other";
  }
  return "other";
}

EnvLookup process_env() {
  return [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };
}

PluginKind plugin_kind(const std::string& path, const EnvLookup& env) {
  if (const char* p = env("TORCH_TPU_PLATFORM")) {
    const std::string platform = lower(p);
    if (platform == "cpu") return PluginKind::kXlaCpu;
    if (platform == "cuda" || platform == "gpu") return PluginKind::kXlaGpu;
    if (platform == "tpu") return PluginKind::kOther;
    bad_setting("TORCH_TPU_PLATFORM", p, "use cpu, cuda or tpu, or unset it (default cpu)");
  }
  const std::string base = lower(path.substr(path.find_last_of('/') + 1));
  if (contains(base, "cpu")) return PluginKind::kXlaCpu;
  if (contains(base, "cuda") || contains(base, "gpu")) return PluginKind::kXlaGpu;
  return PluginKind::kOther;
}

std::vector<pjrt::NamedOption> client_create_options(PluginKind kind, const EnvLookup& env,
                                                     int node_id, int num_nodes) {
  std::vector<pjrt::NamedOption> out;
  if (kind == PluginKind::kXlaCpu) {
    // The CPU plugin's collectives join only the devices of one process: no node options.
    out.push_back(pjrt::NamedOption::int64("cpu_device_count", cpu_device_count(env)));
    out.push_back(pjrt::NamedOption::boolean("asynchronous", true));
    return out;
  }
  if (kind == PluginKind::kXlaGpu) add_gpu_options(env, out);
  if (num_nodes > 1) {
    // One client per process, all of them one distributed client.
    out.push_back(pjrt::NamedOption::int64("node_id", node_id));
    out.push_back(pjrt::NamedOption::int64("num_nodes", num_nodes));
  }
  return out;
}

}  // namespace tpu::runtime
