// Host memory for the host transport's copies, reused from collective to collective.
//
// Fresh memory costs the kernel's page faults on first touch - on the development machines about
// 8x the copy itself (64 MB: ~29 ms of faults for a ~3.5 ms copy) - so staging tensors come from a
// pool of blocks by size. A result's block becomes the tpu buffer itself when it can
// (aten/host_transfer.h): it returns to the pool once its tensor and that buffer are both gone.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "pjrt/event.h"

namespace tpu::distributed {

class HostStaging {
 public:
  static HostStaging& get();

  // An uninitialised contiguous CPU tensor in pooled memory.
  at::Tensor empty(at::IntArrayRef sizes, at::ScalarType dtype);
  // A pooled CPU copy of the tpu tensor `t` (waits for the device).
  at::Tensor copy_of(const at::Tensor& t);
  // Writes `host` (a tensor of this pool) into the tpu tensor `dst`, handing it its memory.
  void write(const at::Tensor& dst, at::Tensor host);

  // Idle pooled bytes kept at most (beyond it, released blocks are freed).
  static constexpr size_t kMaxIdleBytes = size_t{1} << 30;

 private:
  HostStaging() = default;
  void release(void* block, size_t bytes);
  std::vector<at::Tensor> returned_locked();

  std::mutex mu_;
  std::multimap<size_t, void*> idle_;
  size_t idle_bytes_ = 0;
  // Host tensors whose memory a device buffer uses, until the event says it is done with it.
  std::vector<std::pair<std::shared_ptr<pjrt::Event>, at::Tensor>> lent_;
};

}  // namespace tpu::distributed
