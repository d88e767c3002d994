// Inclusive scans along one dimension (cumsum, cumprod, positions of true elements).
#pragma once

#include "hlo/builder.h"

namespace tpu::lowering {

// Doubling-step scan (Hillis-Steele): log2(n) shifted combines, O(n log n) work.
hlo::Value inclusive_scan(hlo::Builder& b, hlo::Value x, int64_t dim, hlo::ReduceKind kind);

}  // namespace tpu::lowering
