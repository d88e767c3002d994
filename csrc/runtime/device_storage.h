// What a `tpu` tensor storage holds: a ref-counted handle to an immutable PJRT buffer.
//
// PJRT buffers cannot be written in place, so a write to the storage (an in-place op, a copy
// into a view) computes the new contents as a new buffer and swaps it in here; every tensor
// viewing this storage sees the new contents. A storage that was never written has no buffer
// and reads as zeros.
//
// In Fused Eager a storage can also be *tracked* by the deferred graph (runtime/pending_work.h):
// the graph reads it, and when it is *pending* its newest contents are a value the graph has
// not computed yet. Reading the contents of a pending storage flushes the graph first; giving
// a tracked storage contents from outside (or destroying it) makes the graph forget it.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>

#include "hlo/tensor_type.h"
#include "pjrt/buffer.h"

namespace tpu::runtime {

class DeviceStorage {
 public:
  DeviceStorage(int device, size_t nbytes) : device_(device), nbytes_(nbytes) {}
  ~DeviceStorage();
  DeviceStorage(const DeviceStorage&) = delete;
  DeviceStorage& operator=(const DeviceStorage&) = delete;

  int device() const { return device_; }
  size_t nbytes() const;
  void set_nbytes(size_t nbytes);

  struct Contents {
    std::shared_ptr<pjrt::Buffer> buffer;  // null: never written
    hlo::TensorType type;                  // element type and dims of `buffer`
  };
  Contents contents() const;
  // The buffer when the contents have exactly `type` (null otherwise), without copying the
  // type: a compiled-graph replay collects dozens of these per call.
  std::shared_ptr<pjrt::Buffer> buffer_if(const hlo::TensorType& type) const;
  // The contents as they are now, without flushing pending work (the recorder's view).
  Contents current_contents() const;
  // Replaces the contents; `writer` names the op that produced them (for error messages).
  void set_contents(std::shared_ptr<pjrt::Buffer> buffer, hlo::TensorType type, const char* writer);
  // Drops the buffer (the storage reads as zeros again).
  void clear();
  const char* last_writer() const;

  // Deferred-graph bookkeeping (used by the recorder only).
  bool pending() const { return pending_.load(std::memory_order_acquire); }
  bool tracked() const { return tracked_.load(std::memory_order_acquire); }
  void mark_tracked(bool pending) {
    tracked_.store(true, std::memory_order_release);
    if (pending) pending_.store(true, std::memory_order_release);
  }
  void untrack() {
    pending_.store(false, std::memory_order_release);
    tracked_.store(false, std::memory_order_release);
  }
  // Stores the computed value of a pending storage (the recorder's flush).
  void resolve(std::shared_ptr<pjrt::Buffer> buffer, hlo::TensorType type, const char* writer);

 private:
  const int device_;
  mutable std::mutex mu_;
  size_t nbytes_;
  std::shared_ptr<pjrt::Buffer> buffer_;
  hlo::TensorType type_;
  const char* writer_ = "";
  std::atomic<bool> tracked_{false};
  std::atomic<bool> pending_{false};
};

}  // namespace tpu::runtime
