// LAPACK's pivot search, shared by the factorizations that pivot (LU, Bunch-Kaufman LDL): how it
// sizes a candidate and which candidate it takes on ties, so the factors match the CPU's.
#pragma once

#include <utility>

#include "hlo/builder.h"

namespace tpu::lowering {

// |x|, or |re| + |im| for complex x (LAPACK's cabs1).
hlo::Value pivot_size(hlo::Builder& b, hlo::Value x);
// (largest value, first index holding it) of sizes [B, n] along dim 1 (i64 indices; n when the
// row is empty of candidates, which callers mark with values below every real size).
std::pair<hlo::Value, hlo::Value> first_largest(hlo::Builder& b, hlo::Value sizes);

}  // namespace tpu::lowering
