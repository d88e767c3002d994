// The `tpu` device allocator. allocate(n) does not touch device memory: it creates the
// storage's DeviceStorage handle (no buffer yet), which becomes the DataPtr's data and
// context. data_ptr() of a tpu tensor is therefore a stable handle, not a device address.
// Statistics count the bytes of live storages per device, like CUDA's allocated bytes.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <ATen/core/TensorBase.h>

#include "runtime/device_storage.h"
#include "runtime/memory_figures.h"

namespace tpu::device {

class TpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t mempool_id) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Storage resizes (resize_, UntypedStorage.resize_) change the accounted bytes; a growth is
  // checked against the memory limit first (device/memory_limit.h).
  void check_growth(int device, size_t old_nbytes, size_t new_nbytes);
  void account_resize(int device, size_t old_nbytes, size_t new_nbytes);
};

TpuAllocator& allocator();

// The byte figures getDeviceStats reports and where each came from (runtime/memory_figures.h).
runtime::MemoryFigures memory_figures(c10::DeviceIndex device);
// free/total bytes as getMemoryInfo reports them, with their source.
runtime::MemoryTotals memory_totals(c10::DeviceIndex device);

// The DeviceStorage behind a tpu storage or tensor; errors clearly for anything else.
runtime::DeviceStorage& storage_of(const c10::Storage& storage);
runtime::DeviceStorage& storage_of(const at::TensorBase& tensor);

}  // namespace tpu::device
