// Which memory figures torch.tpu reports, and where each comes from. The plugin's own device
// statistics (PJRT_Device_MemoryStats: the GPU plugin's allocator, libtpu) win where they are
// reported; otherwise (the CPU plugin answers UNIMPLEMENTED) the bytes of live tpu storages
// counted by torch_tpu's allocator and, for totals, the host's memory. Torch-free so the
// precedence is unit-tested with fake statistics (tests/cpp/test_memory_figures.cc).
#pragma once

#include <cstdint>
#include <optional>

#include "pjrt/client.h"

namespace tpu::runtime {

// Names of the sources, as torch.tpu.memory_stats()["source"] reports them.
inline constexpr const char* kSourcePjrt = "pjrt";            // the plugin's device statistics
inline constexpr const char* kSourceAllocator = "allocator";  // torch_tpu's storage counters
inline constexpr const char* kSourceHost = "host";            // the host's physical memory

// The allocator's counters of live storage bytes on one device.
struct TrackedBytes {
  int64_t current = 0;
  int64_t peak = 0;
  // reset_peak_memory_stats() ran: the plugin's peak (which cannot be reset) no longer applies.
  bool peak_reset = false;
  // At the last reset: the allocator's current bytes and the plugin's bytes in use. The peak
  // since then is the plugin's level at the reset plus the allocator's largest growth since.
  int64_t current_at_reset = 0;
  int64_t device_in_use_at_reset = 0;
};

struct MemoryFigures {
  int64_t allocated = 0;
  int64_t peak_allocated = 0;
  int64_t reserved = 0;
  int64_t peak_reserved = 0;
  const char* allocated_source = kSourceAllocator;
  const char* peak_source = kSourceAllocator;
  const char* reserved_source = kSourceAllocator;
};

MemoryFigures choose_memory_figures(const TrackedBytes& tracked,
                                    const std::optional<pjrt::MemoryStats>& device);

struct MemoryTotals {
  int64_t free = 0;
  int64_t total = 0;
  const char* source = kSourceHost;
};

// free/total bytes of a device: the plugin's bytes_limit when it reports one, else the host's
// available/physical memory (the CPU plugin's device memory is the host's).
MemoryTotals choose_memory_totals(const std::optional<pjrt::MemoryStats>& device,
                                  int64_t host_available, int64_t host_total);

}  // namespace tpu::runtime
