// The StableHLO precision of a matrix product or convolution, from its op's attributes
// (aten/precision_policy.h sets them): "precision" (torch.tpu.precision) when present;
// otherwise floating operands use HIGHEST - exact, so GPUs and TPUs do not silently drop to
// TF32 / bf16 passes - except float32 under the TF32 policy ("tf32"), which uses DEFAULT.
#pragma once

#include "hlo/builder.h"
#include "lowering/attrs.h"

namespace tpu::lowering {

// `precision`: the attribute's value, or -1 when absent.
inline hlo::Precision contraction_precision(int64_t precision, bool tf32, ElementType operand) {
  if (precision >= 0) return static_cast<hlo::Precision>(precision);
  const bool default_f32 = tf32 && operand == ElementType::kF32;
  return is_floating(operand) && !default_f32 ? hlo::Precision::kHighest : hlo::Precision::kDefault;
}

inline hlo::Precision contraction_precision(const Attrs& attrs, ElementType operand) {
  return contraction_precision(attrs.get_int("precision", -1), attrs.get_bool("tf32", false), operand);
}

}  // namespace tpu::lowering
