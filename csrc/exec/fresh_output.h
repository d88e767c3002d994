// A new output of an op as a runner returns it: a buffer, or (Fused mode) a value the deferred
// graph will compute. Its own header so that the runners need not include each other.
#pragma once

#include <cstdint>
#include <memory>

#include "hlo/tensor_type.h"
#include "pjrt/buffer.h"

namespace tpu::exec {

struct FreshOutput {
  std::shared_ptr<pjrt::Buffer> buffer;
  hlo::TensorType type;
  int64_t pending = -1;  // the deferred graph's value id, when buffer is null
};

}  // namespace tpu::exec
