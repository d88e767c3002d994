#include "device/memory_limit.h"

#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include <c10/util/Exception.h>

#include "device/allocator.h"
#include "runtime/runtime.h"

namespace tpu::device {

namespace {

constexpr int kMaxDevices = 1024;
constexpr const char* kEnv = "TORCH_TPU_MEMORY_LIMIT";

std::mutex g_mu;
std::array<int64_t, kMaxDevices> g_cap{};       // bytes; 0: none set by a fraction
std::array<double, kMaxDevices> g_fraction{};   // 0: none set (1.0)
std::atomic<bool> g_fraction_set{false};

std::string bytes_str(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

// TORCH_TPU_MEMORY_LIMIT in bytes, or -1 when unset.
int64_t env_limit() {
  static const int64_t limit = [] {
    const char* v = std::getenv(kEnv);
    if (v == nullptr || *v == '\0') return int64_t{-1};
    char* end = nullptr;
    const double n = std::strtod(v, &end);
    std::string unit(end);
    for (const char* tail : {"iB", "B"}) {  // "2G", "2GB", "2GiB" are all 2 * 2^30
      if (unit.size() > 1 && unit.size() >= std::string(tail).size() &&
          unit.compare(unit.size() - std::string(tail).size(), std::string::npos, tail) == 0) {
        unit.resize(unit.size() - std::string(tail).size());
        break;
      }
    }
    double scale = 0;
    if (unit.empty() || unit == "B") scale = 1;
    else if (unit == "K" || unit == "k") scale = 1024.0;
    else if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
    else if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
    else if (unit == "T" || unit == "t") scale = 1024.0 * 1024 * 1024 * 1024;
    TORCH_CHECK(end != v && scale > 0 && n > 0 && std::isfinite(n), kEnv, "='", v,
                "' is not a memory size. Fix: set a byte count such as 8000000000, or 8G / 512M, "
                "or unset it (no limit).");
    return static_cast<int64_t>(n * scale);
  }();
  return limit;
}

}  // namespace

bool memory_limited() { return g_fraction_set.load(std::memory_order_relaxed) || env_limit() >= 0; }

std::optional<int64_t> memory_limit(int device) {
  int64_t cap;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    cap = g_cap[device];
  }
  const int64_t env = env_limit();
  if (cap == 0 && env < 0) return std::nullopt;
  if (cap == 0) return env;
  return env < 0 ? cap : std::min(cap, env);
}

void check_memory_limit(int device, int64_t in_use, int64_t requested) {
  const std::optional<int64_t> cap = memory_limit(device);
  if (!cap || in_use + requested <= *cap) return;
  TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu out of memory: tried to allocate ", bytes_str(requested),
                   " on tpu:", device, ", which holds ", bytes_str(in_use), " in tensors; this process may hold ",
                   bytes_str(*cap), " there (", std::getenv(kEnv) ? kEnv : "torch.tpu.set_per_process_memory_fraction",
                   "). Fix: free tensors you no longer need (del them), use smaller batches or shapes, or "
                   "raise the limit.");
}

int64_t set_memory_fraction(int device, double fraction) {
  TORCH_CHECK_VALUE(fraction > 0 && fraction <= 1, "set_per_process_memory_fraction: fraction must be in (0, 1], got ",
                    fraction);
  runtime::check_device_index(device);
  const int64_t cap = static_cast<int64_t>(fraction * static_cast<double>(memory_totals(device).total));
  std::lock_guard<std::mutex> lock(g_mu);
  g_cap[device] = fraction >= 1 ? 0 : std::max<int64_t>(cap, 1);
  g_fraction[device] = fraction >= 1 ? 0 : fraction;
  if (fraction < 1) g_fraction_set.store(true);
  return cap;
}

double memory_fraction(int device) {
  runtime::check_device_index(device);
  std::lock_guard<std::mutex> lock(g_mu);
  return g_fraction[device] == 0 ? 1.0 : g_fraction[device];
}

bool is_out_of_memory(const std::string& message) {
  return message.find("RESOURCE_EXHAUSTED") != std::string::npos ||
         message.find("Out of memory") != std::string::npos;
}

void raise_device_error(const std::string& message, int device) {
  if (!is_out_of_memory(message)) TORCH_CHECK(false, message);
  const std::optional<int64_t> cap = memory_limit(device);
  TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu out of memory on tpu:", device, " (", message, "); ",
                   bytes_str(memory_figures(static_cast<c10::DeviceIndex>(device)).allocated), " is held in tensors",
                   cap ? ", the limit is " + bytes_str(*cap) : std::string(),
                   ". Fix: free tensors you no longer need (del them), use smaller batches or shapes, or set a "
                   "limit below the device's memory (", kEnv, ", torch.tpu.set_per_process_memory_fraction) to "
                   "get this error before the device runs out.");
}

}  // namespace tpu::device
