// DeviceGuardImplInterface for `tpu`: device switching, streams and events.
//
// PJRT has no streams: the device orders work by data dependencies. Streams are accepted for
// API compatibility (ids are handed out per device); synchronizing or querying any stream
// covers all work on its device, which is always at least as strong as CUDA's guarantee.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <unordered_map>

#include "device/current_device.h"
#include "device/event.h"
#include "runtime/runtime.h"

namespace tpu::device {
namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::Stream;

thread_local std::unordered_map<DeviceIndex, c10::StreamId> t_current_stream;
std::atomic<c10::StreamId> g_next_stream_id{1};

Device tpu(DeviceIndex i) { return Device(c10::DeviceType::PrivateUse1, i); }

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }

  Device exchangeDevice(Device d) const override {
    return tpu(exchange_device(d.index()));
  }
  Device getDevice() const override { return tpu(current_device()); }
  void setDevice(Device d) const override { set_device(d.index()); }
  void uncheckedSetDevice(Device d) const noexcept override {
    try {
      set_device(d.index());
    } catch (...) {
    }
  }

  Stream getStream(Device d) const override {
    auto it = t_current_stream.find(d.index());
    const c10::StreamId id = it == t_current_stream.end() ? 0 : it->second;
    return Stream(Stream::UNSAFE, tpu(d.index()), id);
  }
  Stream getDefaultStream(Device d) const override { return Stream(Stream::DEFAULT, tpu(d.index())); }
  Stream getStreamFromGlobalPool(Device d, bool) const override { return getNewStream(d, 0); }
  Stream getNewStream(Device d, int) const override {
    return Stream(Stream::UNSAFE, tpu(d.index()), g_next_stream_id.fetch_add(1));
  }
  Stream exchangeStream(Stream s) const override {
    Stream old = getStream(s.device());
    t_current_stream[s.device_index()] = s.id();
    return old;
  }
  DeviceIndex deviceCount() const noexcept override {
    return static_cast<DeviceIndex>(runtime::Runtime::device_count_or_zero());
  }

  bool queryStream(const Stream& s) const override {
    return runtime::Runtime::get().tracker(s.device_index()).idle();
  }
  void synchronizeStream(const Stream& s) const override {
    runtime::Runtime::get().tracker(s.device_index()).synchronize();
  }
  void synchronizeDevice(DeviceIndex device) const override {
    runtime::Runtime::get().tracker(device < 0 ? current_device() : device).synchronize();
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const Stream&) const override {}

  void record(void** event, const Stream& stream, const DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    const DeviceIndex device = device_index < 0 ? stream.device_index() : device_index;
    TORCH_CHECK(device == stream.device_index(), "Event device index ", device,
                " does not match recording stream's device index ", stream.device_index(), ".");
    if (*event == nullptr) *event = new TpuEvent(device);
    auto* e = static_cast<TpuEvent*>(*event);
    TORCH_CHECK(e->device() == device, "Event was created on tpu:", e->device(),
                " and cannot be recorded on tpu:", device);
    e->record(/*timing=*/flag == c10::EventFlag::BACKEND_DEFAULT);  // enable_timing=True
  }
  void block(void*, const Stream&) const override {
    // Work on the device is ordered by data dependencies; there is nothing to wait for.
  }
  bool queryEvent(void* event) const override {
    return event == nullptr || static_cast<TpuEvent*>(event)->query();
  }
  void destroyEvent(void* event, const DeviceIndex) const noexcept override {
    delete static_cast<TpuEvent*>(event);
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) static_cast<TpuEvent*>(event)->synchronize();
  }
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    return static_cast<TpuEvent*>(start)->elapsed_ms(*static_cast<TpuEvent*>(end));
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace tpu::device
