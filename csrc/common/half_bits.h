// Bit patterns of IEEE binary16 and bfloat16 values, rounded to nearest even.
#pragma once

#include <cstdint>

namespace tpu {

uint16_t f16_bits(float value);
uint16_t bf16_bits(float value);

}  // namespace tpu
