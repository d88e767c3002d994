// Inclusive scans along one dimension (cumsum, cumprod, positions of true elements).
#pragma once

#include "hlo/builder.h"

namespace tpu::lowering {

#include <functional>

// Doubling-step scan (Hillis-Steele): log2(n) shifted combines, O(n log n) work. `combine`
// must be associative; `identity` (rank-0) fills the shifted-in positions.
hlo::Value inclusive_scan(hlo::Builder& b, hlo::Value x, int64_t dim, hlo::Value identity,
                          const std::function<hlo::Value(hlo::Value earlier, hlo::Value later)>& combine);
// Sum or product scan.
hlo::Value inclusive_scan(hlo::Builder& b, hlo::Value x, int64_t dim, hlo::ReduceKind kind);

}  // namespace tpu::lowering
