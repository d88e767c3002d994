// Precedence of memory figures: the plugin's statistics where reported, else the allocator's
// counters and the host's memory (runtime/memory_figures.h), with fake statistics.
#include <gtest/gtest.h>

#include <string>

#include "runtime/memory_figures.h"

namespace tpu::runtime {
namespace {

TrackedBytes tracked(int64_t current, int64_t peak, bool reset = false) {
  TrackedBytes t;
  t.current = current;
  t.peak = peak;
  t.peak_reset = reset;
  return t;
}

TEST(MemoryFigures, AbsentStatsUseTheAllocatorCounters) {
  const MemoryFigures f = choose_memory_figures(tracked(100, 300), std::nullopt);
  EXPECT_EQ(f.allocated, 100);
  EXPECT_EQ(f.peak_allocated, 300);
  EXPECT_EQ(f.reserved, 100);
  EXPECT_EQ(f.peak_reserved, 300);
  EXPECT_EQ(std::string(f.allocated_source), kSourceAllocator);
  EXPECT_EQ(std::string(f.peak_source), kSourceAllocator);
  EXPECT_EQ(std::string(f.reserved_source), kSourceAllocator);
}

TEST(MemoryFigures, PluginStatsWinWhereReported) {
  pjrt::MemoryStats s;
  s.bytes_in_use = 1000;
  s.peak_bytes_in_use = 5000;
  s.bytes_reserved = 8000;
  s.peak_bytes_reserved = 9000;
  const MemoryFigures f = choose_memory_figures(tracked(100, 300), s);
  EXPECT_EQ(f.allocated, 1000);
  EXPECT_EQ(f.peak_allocated, 5000);
  EXPECT_EQ(f.reserved, 8000);
  EXPECT_EQ(f.peak_reserved, 9000);
  EXPECT_EQ(std::string(f.allocated_source), kSourcePjrt);
  EXPECT_EQ(std::string(f.peak_source), kSourcePjrt);
  EXPECT_EQ(std::string(f.reserved_source), kSourcePjrt);
}

TEST(MemoryFigures, MissingPluginPeakFallsBackNeverBelowCurrent) {
  pjrt::MemoryStats s;
  s.bytes_in_use = 1000;  // no peak, no reserved
  const MemoryFigures f = choose_memory_figures(tracked(100, 300), s);
  EXPECT_EQ(f.allocated, 1000);
  EXPECT_EQ(f.peak_allocated, 1000);
  EXPECT_EQ(std::string(f.peak_source), kSourceAllocator);
  EXPECT_EQ(f.reserved, 1000);
  EXPECT_EQ(std::string(f.reserved_source), kSourcePjrt);
}

TEST(MemoryFigures, ResetPeakIgnoresThePluginPeak) {
  pjrt::MemoryStats s;
  s.bytes_in_use = 1000;
  s.peak_bytes_in_use = 5000;
  const MemoryFigures f = choose_memory_figures(tracked(100, 2000, /*reset=*/true), s);
  EXPECT_EQ(f.peak_allocated, 2000);
  EXPECT_EQ(std::string(f.peak_source), kSourceAllocator);
}

TEST(MemoryFigures, PeakAfterResetIsThePluginLevelPlusTheAllocatorGrowth) {
  pjrt::MemoryStats s;
  s.bytes_in_use = 256;  // the plugin has materialised less than the allocator counts
  s.peak_bytes_in_use = 9000;
  TrackedBytes t = tracked(4096, 4096, /*reset=*/true);
  t.current_at_reset = 4096;
  t.device_in_use_at_reset = 256;
  // Right after the reset the peak is what is in use, on the plugin's scale.
  EXPECT_EQ(choose_memory_figures(t, s).peak_allocated, 256);
  // 1000 bytes allocated and freed since: the peak grew by them.
  t.peak = 5096;
  EXPECT_EQ(choose_memory_figures(t, s).peak_allocated, 1256);
  // Never below what is in use now.
  s.bytes_in_use = 3000;
  EXPECT_EQ(choose_memory_figures(t, s).peak_allocated, 3000);
}

TEST(MemoryTotals, PluginLimitWinsOverHostMemory) {
  pjrt::MemoryStats s;
  s.bytes_in_use = 300;
  s.bytes_limit = 1000;
  const MemoryTotals t = choose_memory_totals(s, 50, 60);
  EXPECT_EQ(t.total, 1000);
  EXPECT_EQ(t.free, 700);
  EXPECT_EQ(std::string(t.source), kSourcePjrt);

  pjrt::MemoryStats no_limit;
  no_limit.bytes_in_use = 300;
  const MemoryTotals h = choose_memory_totals(no_limit, 50, 60);
  EXPECT_EQ(h.total, 60);
  EXPECT_EQ(h.free, 50);
  EXPECT_EQ(std::string(h.source), kSourceHost);
  EXPECT_EQ(std::string(choose_memory_totals(std::nullopt, 50, 60).source), kSourceHost);
}

}  // namespace
}  // namespace tpu::runtime
