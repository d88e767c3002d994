// The StableHLO builder names every lowering uses, brought into tpu::lowering once.
#pragma once

#include "hlo/builder.h"

namespace tpu::lowering {

using hlo::Builder;
using hlo::Compare;
using hlo::Dims;
using hlo::ReduceKind;
using hlo::TensorType;
using hlo::Value;

}  // namespace tpu::lowering
