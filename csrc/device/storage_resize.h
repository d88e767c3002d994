// Growing or shrinking a tpu storage (Tensor.resize_, UntypedStorage.resize_, FSDP's
// free-by-resize-to-0). The storage keeps its handle; its buffer is replaced by one of the new
// size holding the old bytes (new bytes read as zeros).
#pragma once

#include <c10/core/Storage.h>

namespace tpu::device {

void resize_storage_bytes(const c10::Storage& storage, size_t new_nbytes);

}  // namespace tpu::device
