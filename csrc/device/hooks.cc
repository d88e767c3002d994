// PrivateUse1HooksInterface for `tpu`: availability, device count and selection, generators,
// pinned memory and storage resizing.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Storage.h>

#include "device/allocator.h"
#include "device/current_device.h"
#include "device/generator.h"
#include "device/host_allocator.h"
#include "device/storage_resize.h"
#include "runtime/runtime.h"

namespace tpu::device {
namespace {

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  void init() const override { runtime::Runtime::get(); }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return runtime::Runtime::device_count_or_zero() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return runtime::Runtime::created(); }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(runtime::Runtime::device_count_or_zero());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    return exchange_device(device);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    if (device < 0 || device >= runtime::Runtime::device_count_or_zero()) return current_device();
    return exchange_device(device);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return new_generator(device);
  }
  at::Device getDeviceFromPtr(void*) const override {
    return at::Device(c10::DeviceType::PrivateUse1, current_device());
  }
  bool isPinnedPtr(const void* data) const override { return pinned_allocator().is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &pinned_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

const bool g_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new TpuHooks());
  return true;
}();

}  // namespace
}  // namespace tpu::device
