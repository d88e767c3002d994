#include "cache/host_cpu.h"

#include <sys/utsname.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace tpu::cache {

namespace {

std::set<std::string> tokens(const std::string& s) {
  std::istringstream in(s);
  std::set<std::string> out;
  for (std::string t; in >> t;) out.insert(t);
  return out;
}

// The feature flags of the first CPU listed in /proc/cpuinfo ("" if unreadable).
std::string kernel_cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name == "flags" || name == "Features") return line.substr(colon + 1);
  }
  return "";
}

std::string detect() {
  std::string flags;
  if (const char* hook = std::getenv("TORCH_TPU_CACHE_HOST_FEATURES"); hook && *hook) {
    flags = hook;
  } else {
    flags = kernel_cpu_flags();
  }
  struct utsname u {};
  if (::uname(&u) == 0) flags += std::string(" arch:") + u.machine;
  return canonical_record(flags);
}

}  // namespace

const std::string& host_cpu_record() {
  static const std::string record = detect();
  return record;
}

std::string canonical_record(const std::string& flags) {
  std::string out;
  for (const std::string& t : tokens(flags)) {
    if (!out.empty()) out += ' ';
    out += t;
  }
  return out;
}

std::string missing_features(const std::string& recorded, const std::string& host) {
  const std::set<std::string> have = tokens(host);
  std::string out;
  for (const std::string& t : tokens(recorded)) {
    if (have.count(t)) continue;
    if (!out.empty()) out += ' ';
    out += t;
  }
  return out;
}

}  // namespace tpu::cache
