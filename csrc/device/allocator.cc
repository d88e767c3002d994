#include "device/allocator.h"

#include <unistd.h>

#include <array>
#include <mutex>

#include <c10/util/Exception.h>

#include "device/current_device.h"
#include "device/memory_limit.h"
#include "exec/program_cache.h"
#include "runtime/runtime.h"

namespace tpu::device {

namespace {

constexpr int kMaxDevices = 1024;

struct DeviceCounters {
  c10::CachingAllocator::Stat allocations;
  c10::CachingAllocator::Stat bytes;
};

std::mutex g_stats_mutex;
std::array<DeviceCounters, kMaxDevices> g_stats;
// Per device: reset_peak_memory_stats() ran, so the plugin's (unresettable) peak is stale; and
// the levels at that reset (runtime::TrackedBytes).
struct PeakReset {
  bool done = false;
  int64_t current = 0;
  int64_t device_in_use = 0;
};
std::array<PeakReset, kMaxDevices> g_peak_reset{};

// torch.profiler(profile_memory=True): allocation (+) and free (-) events of tpu memory. The
// check is a thread-local read; nothing is reported outside a profiling session.
void report_to_profiler(void* ptr, int64_t delta, int device, int64_t total) {
  if (C10_UNLIKELY(c10::memoryProfilingEnabled())) {
    c10::reportMemoryUsageToProfiler(
        ptr, delta, static_cast<size_t>(total), static_cast<size_t>(total),
        c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
  }
}

void delete_storage(void* ctx) {
  auto* s = static_cast<runtime::DeviceStorage*>(ctx);
  int64_t total = 0;
  {
    std::lock_guard<std::mutex> lock(g_stats_mutex);
    DeviceCounters& c = g_stats[s->device()];
    c.allocations.decrease(1);
    c.bytes.decrease(s->nbytes());
    total = c.bytes.current;
  }
  report_to_profiler(s, -static_cast<int64_t>(s->nbytes()), s->device(), total);
  delete s;
}

void fill_stat_array(c10::CachingAllocator::StatArray& array, const c10::CachingAllocator::Stat& stat) {
  array[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)] = stat;
}

}  // namespace

c10::DataPtr TpuAllocator::allocate(size_t nbytes) {
  const int device = current_device();
  runtime::check_device_index(device);
  int64_t total = 0;
  if (memory_limited()) {
    {
      std::lock_guard<std::mutex> lock(g_stats_mutex);
      total = g_stats[device].bytes.current;
    }
    check_memory_limit(device, total, static_cast<int64_t>(nbytes));  // torch.OutOfMemoryError past the cap
  }
  auto* storage = new runtime::DeviceStorage(device, nbytes);
  {
    std::lock_guard<std::mutex> lock(g_stats_mutex);
    g_stats[device].allocations.increase(1);
    g_stats[device].bytes.increase(nbytes);
    total = g_stats[device].bytes.current;
  }
  report_to_profiler(storage, static_cast<int64_t>(nbytes), device, total);
  return c10::DataPtr(storage, storage, &delete_storage,
                      c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
}

c10::DeleterFnPtr TpuAllocator::raw_deleter() const { return &delete_storage; }

void TpuAllocator::copy_data(void*, const void*, std::size_t) const {
  TORCH_CHECK(false, "tpu storages hold device buffers, not host memory: they cannot be copied "
                     "with memcpy. Use tensor.copy_() or .cpu() instead.");
}

void TpuAllocator::check_growth(int device, size_t old_nbytes, size_t new_nbytes) {
  if (new_nbytes <= old_nbytes || !memory_limited()) return;
  int64_t in_use = 0;
  {
    std::lock_guard<std::mutex> lock(g_stats_mutex);
    in_use = g_stats[device].bytes.current;
  }
  check_memory_limit(device, in_use, static_cast<int64_t>(new_nbytes - old_nbytes));
}

void TpuAllocator::account_resize(int device, size_t old_nbytes, size_t new_nbytes) {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats[device].bytes.decrease(old_nbytes);
  g_stats[device].bytes.increase(new_nbytes);
}

void TpuAllocator::emptyCache(c10::MempoolId_t) { exec::ProgramCache::get().scalars().clear(); }

runtime::MemoryFigures memory_figures(c10::DeviceIndex device) {
  runtime::check_device_index(device);
  // Asked outside the lock: a PJRT call (an error, on the CPU plugin).
  const auto plugin_stats = runtime::Runtime::get().client().memory_stats(device);
  runtime::TrackedBytes tracked;
  {
    std::lock_guard<std::mutex> lock(g_stats_mutex);
    tracked.current = g_stats[device].bytes.current;
    tracked.peak = g_stats[device].bytes.peak;
    tracked.peak_reset = g_peak_reset[device].done;
    tracked.current_at_reset = g_peak_reset[device].current;
    tracked.device_in_use_at_reset = g_peak_reset[device].device_in_use;
  }
  return runtime::choose_memory_figures(tracked, plugin_stats);
}

c10::CachingDeviceAllocator::DeviceStats TpuAllocator::getDeviceStats(c10::DeviceIndex device) {
  const runtime::MemoryFigures figures = memory_figures(device);
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  const DeviceCounters& c = g_stats[device];
  c10::CachingDeviceAllocator::DeviceStats stats;
  fill_stat_array(stats.allocation, c.allocations);
  fill_stat_array(stats.active, c.allocations);
  fill_stat_array(stats.segment, c.allocations);
  // Byte figures: the plugin's where it reports them (runtime/memory_figures.h); allocated and
  // freed totals are always the allocator's.
  c10::CachingAllocator::Stat bytes = c.bytes;
  bytes.current = figures.allocated;
  bytes.peak = figures.peak_allocated;
  fill_stat_array(stats.allocated_bytes, bytes);
  fill_stat_array(stats.active_bytes, bytes);
  fill_stat_array(stats.requested_bytes, bytes);
  c10::CachingAllocator::Stat reserved = c.bytes;
  reserved.current = figures.reserved;
  reserved.peak = figures.peak_reserved;
  fill_stat_array(stats.reserved_bytes, reserved);
  stats.num_device_alloc = c.allocations.allocated;
  stats.num_device_free = c.allocations.freed;
  return stats;
}

void TpuAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  runtime::check_device_index(device);
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats[device].allocations.reset_accumulated();
  g_stats[device].bytes.reset_accumulated();
}

void TpuAllocator::resetPeakStats(c10::DeviceIndex device) {
  runtime::check_device_index(device);
  // Asked outside the lock, as in memory_figures.
  const auto plugin_stats = runtime::Runtime::get().client().memory_stats(device);
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats[device].allocations.reset_peak();
  g_stats[device].bytes.reset_peak();
  const int64_t current = g_stats[device].bytes.current;
  g_peak_reset[device] = {true, current, plugin_stats ? plugin_stats->bytes_in_use : current};
}

std::pair<size_t, size_t> TpuAllocator::getMemoryInfo(c10::DeviceIndex device) {
  const runtime::MemoryTotals t = memory_totals(device);
  return {static_cast<size_t>(t.free), static_cast<size_t>(t.total)};
}

runtime::MemoryTotals memory_totals(c10::DeviceIndex device) {
  auto& rt = runtime::Runtime::get();
  runtime::check_device_index(device);
  // The CPU plugin reports no limits: its memory is the host's.
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  return runtime::choose_memory_totals(rt.client().memory_stats(device),
                                       ::sysconf(_SC_AVPHYS_PAGES) * page,
                                       ::sysconf(_SC_PHYS_PAGES) * page);
}

TpuAllocator& allocator() {
  static TpuAllocator instance;
  return instance;
}

namespace {
const bool g_registered = [] {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &allocator());
  return true;
}();
}  // namespace

runtime::DeviceStorage& storage_of(const c10::Storage& storage) {
  const c10::DataPtr& dp = storage.data_ptr();
  TORCH_CHECK(dp.get_deleter() == &delete_storage,
              "expected a storage allocated by torch_tpu on a tpu device, got one on ",
              storage.device());
  return *static_cast<runtime::DeviceStorage*>(dp.get_context());
}

runtime::DeviceStorage& storage_of(const at::TensorBase& tensor) {
  TORCH_CHECK(tensor.has_storage(), "tpu tensor has no storage");
  return storage_of(tensor.storage());
}

}  // namespace tpu::device
