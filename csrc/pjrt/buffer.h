// RAII wrapper of PJRT_Buffer: metadata, device-to-host and device-to-device transfers.
//
// A Buffer can also be *promised*: created before the execution that produces it has been
// handed to PJRT (runtime/launch_queue.h). It is fulfilled (or failed) exactly once, by the
// launching thread; every use of a promised buffer first waits for that, through the waiter
// installed by the runtime.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/element_type.h"
#include "pjrt/c_api.h"
#include "pjrt/event.h"

namespace tpu::pjrt {

class Buffer {
 public:
  Buffer(const PJRT_Api* api, PJRT_Buffer* buffer) : api_(api), buffer_(buffer) {}
  // A promised buffer.
  explicit Buffer(const PJRT_Api* api) : api_(api), buffer_(nullptr), promised_(true) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // The PJRT buffer; for a promised buffer, waits until it is fulfilled and throws
  // std::runtime_error with the launch's message if it failed.
  PJRT_Buffer* raw() const {
    PJRT_Buffer* b = buffer_.load(std::memory_order_acquire);
    return b != nullptr ? b : await_promise();
  }
  // Promised buffers: set exactly once, from the launching thread.
  void fulfil(PJRT_Buffer* buffer);
  void fail(std::string message);
  // True while a promised buffer is neither fulfilled nor failed.
  bool unresolved() const {
    return promised_ && buffer_.load(std::memory_order_acquire) == nullptr &&
           !failed_.load(std::memory_order_acquire);
  }
  // Installed by the runtime: returns once `promised` is resolved (or can no longer be).
  static void set_promise_waiter(void (*waiter)(const Buffer& promised));

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
  // The address of the buffer's memory (PJRT_Buffer_UnsafePointer): host memory on the XLA CPU
  // plugin, where it may be read directly once ready_event() has fired.
  const void* unsafe_pointer() const;
  // True when the plugin reports the data dense and row-major (descending minor-to-major, no
  // tiles); false when it stores it otherwise or cannot say.
  bool dense_row_major() const;
  bool is_deleted() const;
  // Releases the device memory now; later reads fail with a PjrtError.
  void release_memory();

  // References held only to keep this buffer alive while the execution that *produces* it is in
  // flight (runtime::WorkTracker). A later program may take (donate) such a buffer: PJRT orders
  // it after the definition, so these references do not make it shared.
  void hold_while_defined() { defining_holds_.fetch_add(1, std::memory_order_relaxed); }
  void release_defined_hold() { defining_holds_.fetch_sub(1, std::memory_order_relaxed); }
  long defining_holds() const { return defining_holds_.load(std::memory_order_relaxed); }

 private:
  PJRT_Buffer* await_promise() const;

  const PJRT_Api* api_;
  std::atomic<PJRT_Buffer*> buffer_;
  const bool promised_ = false;
  std::atomic<bool> failed_{false};
  std::atomic<long> defining_holds_{0};
  std::string error_;  // written before failed_ is set
};

// Calls into PJRT_Buffer_Destroy made on the calling thread and the wall time spent inside
// them (the XLA CPU plugin frees host memory there; benchmarks report it apart from our work).
struct DestroyCallStats {
  uint64_t calls = 0;
  uint64_t nanoseconds = 0;
};
DestroyCallStats destroy_call_stats_on_this_thread();

// Whether a program may take (donate) `b`: nothing holds it besides the `expected` references its
// caller knows of and in-flight executions that produce it.
inline bool donatable(const std::shared_ptr<Buffer>& b, long expected) {
  return b.use_count() - b->defining_holds() <= expected;
}

}  // namespace tpu::pjrt
