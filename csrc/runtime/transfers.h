// Data crossing between host memory and device buffers, and between devices: the PJRT transfer
// steps behind copy_, .cpu(), .item() and tpu_dist's host transport, free of PyTorch (the aten
// kernels in aten/copy_ops.cc unpack tensors and call these).
//
// Asynchronous transfers are recorded in the device's WorkTracker, so a synchronize waits for
// them and names them in errors; whatever they read stays alive until they have finished.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/element_type.h"
#include "hlo/tensor_type.h"
#include "pjrt/buffer.h"
#include "pjrt/client.h"
#include "pjrt/event.h"
#include "runtime/work_tracker.h"

namespace tpu::runtime {

// A new buffer on `device` with the dense host array `data` (dtype, dims), copied during the
// call: the caller may reuse `data` at once.
std::shared_ptr<pjrt::Buffer> upload(const pjrt::Client& client, const void* data, ElementType dtype,
                                     const hlo::Dims& dims, int device);

// The same without waiting for the copy: `keep` (the owner of `data`, e.g. a pinned host tensor)
// is held until the transfer has read it, and the transfer is recorded in `tracker`.
std::shared_ptr<pjrt::Buffer> upload_async(const pjrt::Client& client, const void* data,
                                           ElementType dtype, const hlo::Dims& dims, int device,
                                           std::shared_ptr<const void> keep, WorkTracker& tracker);

// A buffer that may be the host memory `data` itself (the XLA CPU plugin keeps device buffers in
// host memory): no copy. The caller must neither change nor free `data` until `done_with_host`
// fires (null: the values were copied and `data` is free at once).
struct AdoptedUpload {
  std::shared_ptr<pjrt::Buffer> buffer;
  std::shared_ptr<pjrt::Event> done_with_host;
};
AdoptedUpload upload_adopting(const pjrt::Client& client, const void* data, ElementType dtype,
                              const hlo::Dims& dims, int device);

// Waits for `buffer` and copies it (`nbytes`, its dense size) into `dst`. Where device memory is
// host memory (the XLA CPU plugin) a ready buffer is copied in place on this thread; elsewhere
// PJRT's device-to-host transfer runs. Throws std::runtime_error with the producer's error.
void read(const pjrt::Buffer& buffer, void* dst, size_t nbytes);

// The value of a bool (PRED) scalar buffer, read as above (a device check's verdict).
bool read_flag(const pjrt::Buffer& buffer);

// Blocking reads so far, and those copied in place.
struct ReadStats {
  int64_t reads = 0;
  int64_t in_place = 0;
};
ReadStats read_stats();

// Waits for `buffer` and copies its first `nbytes` into `dst`. A device error is thrown as
// std::runtime_error naming `writer` (the op that produced the buffer). A blocking read is a
// synchronization: a failed device assertion recorded in `tracker` is thrown too.
void download(const pjrt::Buffer& buffer, void* dst, size_t nbytes, const char* writer,
              WorkTracker& tracker);

// The same without waiting: `dst` must stay valid until `tracker` has synchronized; `buffer` is
// held until the copy has finished.
void download_async(std::shared_ptr<pjrt::Buffer> buffer, void* dst, size_t nbytes, WorkTracker& tracker);

// A copy of `buffer` on another device.
std::shared_ptr<pjrt::Buffer> copy_to_device(const pjrt::Buffer& buffer, const pjrt::DeviceInfo& device);

}  // namespace tpu::runtime
