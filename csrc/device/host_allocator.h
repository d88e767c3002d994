// Pinned host memory for `tpu`: page-aligned host allocations that torch_tpu recognises, so
// pin_memory(), is_pinned() and non-blocking host<->device copies behave as with CUDA. PJRT
// may read such memory asynchronously; the copy keeps the host tensor alive until it is done.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace tpu::device {

class PinnedHostAllocator final : public at::HostAllocator {
 public:
  at::DataPtr allocate(size_t nbytes) override;
  at::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override;
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}

  bool is_pinned(const void* ptr) const;
};

PinnedHostAllocator& pinned_allocator();

}  // namespace tpu::device
