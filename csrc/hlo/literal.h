// Spelling of scalar literals in StableHLO text. Floating-point values are printed as the hex
// bit pattern of the target type, so constants are exact (including inf, nan and -0.0).
#pragma once

#include <cstdint>
#include <string>

#include "common/element_type.h"

namespace tpu::hlo {

// The literal for `value` in a dense<...> attribute of element type `t`. Integral types take
// `value` truncated toward zero; bool takes value != 0.
std::string float_literal(ElementType t, double value);
std::string int_literal(ElementType t, int64_t value);

}  // namespace tpu::hlo
