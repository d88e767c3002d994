// How collective lowerings (lowering/collectives.cc) combine values across a group: the value of
// their "combine" attribute.
#pragma once

#include <cstdint>

namespace tpu::lowering {

enum class CollectiveCombine : int64_t { kSum = 0, kProd, kMax, kMin, kAnd, kOr, kXor };

}  // namespace tpu::lowering
