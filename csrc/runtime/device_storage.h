// What a `tpu` tensor storage holds: a ref-counted handle to an immutable PJRT buffer.
//
// PJRT buffers cannot be written in place, so a write to the storage (an in-place op, a copy
// into a view) computes the new contents as a new buffer and swaps it in here; every tensor
// viewing this storage sees the new contents. A storage that was never written has no buffer
// and reads as zeros.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>

#include "hlo/tensor_type.h"
#include "pjrt/buffer.h"

namespace tpu::runtime {

class DeviceStorage {
 public:
  DeviceStorage(int device, size_t nbytes) : device_(device), nbytes_(nbytes) {}

  int device() const { return device_; }
  size_t nbytes() const;
  void set_nbytes(size_t nbytes);

  struct Contents {
    std::shared_ptr<pjrt::Buffer> buffer;  // null: never written
    hlo::TensorType type;                  // element type and dims of `buffer`
  };
  Contents contents() const;
  // Replaces the contents; `writer` names the op that produced them (for error messages).
  void set_contents(std::shared_ptr<pjrt::Buffer> buffer, hlo::TensorType type, const char* writer);
  // Drops the buffer (the storage reads as zeros again).
  void clear();
  const char* last_writer() const;

 private:
  const int device_;
  mutable std::mutex mu_;
  size_t nbytes_;
  std::shared_ptr<pjrt::Buffer> buffer_;
  hlo::TensorType type_;
  const char* writer_ = "";
};

}  // namespace tpu::runtime
