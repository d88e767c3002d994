// The calling thread's current tpu device (like CUDA's current device), validated against
// the runtime's device count.
#pragma once

#include <c10/core/Device.h>

namespace tpu::device {

c10::DeviceIndex current_device();
// Throws a clear error for an index outside 0..device_count-1.
void set_device(c10::DeviceIndex index);
// Sets the device and returns the previous one.
c10::DeviceIndex exchange_device(c10::DeviceIndex index);
// The index a tensor/op on `device` runs on (resolving "tpu" without an index).
c10::DeviceIndex resolve(c10::Device device);

}  // namespace tpu::device
