#include "runtime/memory_figures.h"

#include <algorithm>

namespace tpu::runtime {

MemoryFigures choose_memory_figures(const TrackedBytes& tracked,
                                    const std::optional<pjrt::MemoryStats>& device) {
  MemoryFigures f;
  if (!device) {
    // No device statistics: torch_tpu keeps no cache, so reserved equals allocated.
    f.allocated = f.reserved = tracked.current;
    f.peak_allocated = f.peak_reserved = tracked.peak;
    return f;
  }
  f.allocated = device->bytes_in_use;
  f.allocated_source = kSourcePjrt;
  if (device->peak_bytes_in_use && !tracked.peak_reset) {
    f.peak_allocated = *device->peak_bytes_in_use;
    f.peak_source = kSourcePjrt;
  } else {
    // The plugin's peak is missing or predates a reset: the plugin's level at the reset plus
    // the allocator's largest growth since (without a reset: the allocator's peak), never below
    // what is in use now. The allocator's own bytes are not the plugin's (XLA's buffers,
    // storages not yet written), so only its growth is added.
    const int64_t growth = std::max<int64_t>(0, tracked.peak - tracked.current_at_reset);
    f.peak_allocated = std::max(tracked.device_in_use_at_reset + growth, f.allocated);
  }
  if (device->bytes_reserved) {
    f.reserved = *device->bytes_reserved;
    f.reserved_source = kSourcePjrt;
  } else {
    f.reserved = f.allocated;
    f.reserved_source = f.allocated_source;
  }
  const bool device_peak_reserved = device->peak_bytes_reserved && !tracked.peak_reset;
  f.peak_reserved = device_peak_reserved ? *device->peak_bytes_reserved
                                         : std::max(f.peak_allocated, f.reserved);
  return f;
}

MemoryTotals choose_memory_totals(const std::optional<pjrt::MemoryStats>& device,
                                  int64_t host_available, int64_t host_total) {
  MemoryTotals t;
  if (device && device->bytes_limit) {
    t.total = *device->bytes_limit;
    t.free = t.total - std::min(t.total, device->bytes_in_use);
    t.source = kSourcePjrt;
    return t;
  }
  t.free = host_available;
  t.total = host_total;
  return t;
}

}  // namespace tpu::runtime
