// RAII wrapper of PJRT_Buffer: metadata, device-to-host and device-to-device transfers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/element_type.h"
#include "pjrt/c_api.h"
#include "pjrt/event.h"

namespace tpu::pjrt {

class Buffer {
 public:
  Buffer(const PJRT_Api* api, PJRT_Buffer* buffer) : api_(api), buffer_(buffer) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  PJRT_Buffer* raw() const { return buffer_; }
  ElementType element_type() const;
  std::vector<int64_t> dims() const;
  size_t on_device_size() const;

  // Starts copying the whole buffer into `dst` (dense row-major, `size` bytes) and returns the
  // event that fires when the bytes have arrived.
  std::unique_ptr<Event> to_host_async(void* dst, size_t size) const;
  // Blocking copy into `dst`.
  void to_host(void* dst, size_t size) const;
  // A copy of this buffer on `device`.
  std::unique_ptr<Buffer> copy_to_device(PJRT_Device* device) const;
  // Fires when the buffer's contents are computed (or carries the error that prevented it).
  std::unique_ptr<Event> ready_event() const;
  bool is_deleted() const;
  // Releases the device memory now; later reads fail with a PjrtError.
  void release_memory();

 private:
  const PJRT_Api* api_;
  PJRT_Buffer* buffer_;
};

}  // namespace tpu::pjrt
