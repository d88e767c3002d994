// Conversion between element types with PyTorch's semantics, used wherever a value changes
// dtype (type promotion of inputs, writing results into tensors of another dtype, .to()).
#pragma once

#include "hlo/builder.h"

namespace tpu::lowering {

// Like a C++ static_cast as ATen's CPU kernels do it: floating values convert to narrow
// integers through int64 (truncate toward zero, then wrap), bool is `value != 0`.
hlo::Value cast(hlo::Builder& b, hlo::Value v, ElementType to);

}  // namespace tpu::lowering
