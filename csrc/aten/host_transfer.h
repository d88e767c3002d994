// Host-to-device writes for callers that own their host memory (tpu_dist's host transport): the
// host tensor's memory may become the device buffer itself - the XLA CPU plugin keeps device
// buffers in host memory - so a large result costs no copy and no freshly faulted memory.
// The tensor-facing side only: the transfer itself is runtime::upload_adopting
// (runtime/transfers.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "pjrt/event.h"

namespace tpu::aten {

// Writes the CPU tensor `host` into the tpu tensor `dst` (as copy_ does). When `host` is dense
// with dst's dtype, its memory is handed to the device: the caller must neither change nor free
// it until the returned event fires (then nothing holds it any more). Returns null when the
// values were copied and `host` is free at once.
std::shared_ptr<pjrt::Event> write_adopting_host_memory(const at::Tensor& host, const at::Tensor& dst);

}  // namespace tpu::aten
