#include "hlo/literal.h"

#include "common/half_bits.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace tpu::hlo {

namespace {
std::string hex(uint64_t bits, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%0*llX", digits, static_cast<unsigned long long>(bits));
  return buf;
}
}  // namespace

std::string float_literal(ElementType t, double value) {
  switch (t) {
    case ElementType::kF64: {
      uint64_t bits;
      std::memcpy(&bits, &value, 8);
      return hex(bits, 16);
    }
    case ElementType::kF32: {
      const float f = static_cast<float>(value);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      return hex(bits, 8);
    }
    case ElementType::kF16: return hex(f16_bits(static_cast<float>(value)), 4);
    case ElementType::kBF16: return hex(bf16_bits(static_cast<float>(value)), 4);
    case ElementType::kBool: return value != 0 ? "true" : "false";
    case ElementType::kC64:
    case ElementType::kC128:  // a real value: (value, 0)
      return "(" + float_literal(complex_part(t), value) + ", " + float_literal(complex_part(t), 0.0) + ")";
    case ElementType::kC32:  // a real value: its float16 bits in the low half, a zero imaginary part
      return std::to_string(f16_bits(static_cast<float>(value)));
    default: break;
  }
  // Integral target: truncate toward zero like a C cast (callers pass in-range values).
  return int_literal(t, static_cast<int64_t>(std::trunc(value)));
}

std::string int_literal(ElementType t, int64_t value) {
  switch (t) {
    case ElementType::kBool: return value != 0 ? "true" : "false";
    case ElementType::kU64: return std::to_string(static_cast<uint64_t>(value));
    case ElementType::kF16:
    case ElementType::kBF16:
    case ElementType::kF32:
    case ElementType::kF64:
    case ElementType::kC64:
    case ElementType::kC128:
    case ElementType::kC32: return float_literal(t, static_cast<double>(value));
    default: return std::to_string(value);
  }
}

}  // namespace tpu::hlo
