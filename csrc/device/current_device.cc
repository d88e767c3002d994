#include "device/current_device.h"

#include <c10/util/Exception.h>

#include "runtime/runtime.h"

namespace tpu::device {

namespace {
thread_local c10::DeviceIndex t_current = 0;

void check(c10::DeviceIndex index) {
  try {
    runtime::check_device_index(index);
  } catch (const std::out_of_range& e) {
    TORCH_CHECK_INDEX(false, e.what());
  }
}
}  // namespace

c10::DeviceIndex current_device() { return t_current; }

void set_device(c10::DeviceIndex index) {
  check(index);
  t_current = index;
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  const c10::DeviceIndex old = t_current;
  if (index >= 0 && index != old) set_device(index);
  return old;
}

c10::DeviceIndex resolve(c10::Device device) {
  if (!device.has_index()) return t_current;
  check(device.index());
  return device.index();
}

}  // namespace tpu::device
