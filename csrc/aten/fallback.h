// The CPU fallback for ops without a tpu lowering: counted, warned once per op, or refused.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tpu::aten {

enum class FallbackMode { kWarn, kError };

std::map<std::string, int64_t> fallback_counts();
void reset_fallback_counts();
void set_fallback_mode(FallbackMode mode);
FallbackMode fallback_mode();

}  // namespace tpu::aten
