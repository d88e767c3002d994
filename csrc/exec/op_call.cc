#include "exec/op_call.h"

#include <cstring>

#include "common/half_bits.h"

namespace tpu::exec {

int64_t View::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

namespace {
template <typename T>
std::string raw(T v) {
  std::string out(sizeof(T), '\0');
  std::memcpy(out.data(), &v, sizeof(T));
  return out;
}
}  // namespace

std::string ScalarValue::bytes() const {
  switch (dtype) {
    case ElementType::kF64: return raw<double>(f);
    case ElementType::kF32: return raw<float>(static_cast<float>(f));
    case ElementType::kF16: return raw<uint16_t>(f16_bits(static_cast<float>(f)));
    case ElementType::kBF16: return raw<uint16_t>(bf16_bits(static_cast<float>(f)));
    case ElementType::kBool: return raw<uint8_t>(i != 0 ? 1 : 0);
    case ElementType::kI8: return raw<int8_t>(static_cast<int8_t>(i));
    case ElementType::kU8: return raw<uint8_t>(static_cast<uint8_t>(i));
    case ElementType::kI16: return raw<int16_t>(static_cast<int16_t>(i));
    case ElementType::kI32: return raw<int32_t>(static_cast<int32_t>(i));
    case ElementType::kU32: return raw<uint32_t>(static_cast<uint32_t>(i));
    case ElementType::kI64: return raw<int64_t>(i);
    case ElementType::kU64: return raw<uint64_t>(static_cast<uint64_t>(i));
    case ElementType::kC64: {  // a real value (complex scalars travel as device tensors)
      const float parts[2] = {static_cast<float>(f), 0.0f};
      return std::string(reinterpret_cast<const char*>(parts), sizeof(parts));
    }
    case ElementType::kC128: {
      const double parts[2] = {f, 0.0};
      return std::string(reinterpret_cast<const char*>(parts), sizeof(parts));
    }
    case ElementType::kC32: {  // a real value: float16 bits, then a zero imaginary part
      const uint16_t parts[2] = {f16_bits(static_cast<float>(f)), 0};
      return std::string(reinterpret_cast<const char*>(parts), sizeof(parts));
    }
  }
  return {};
}

}  // namespace tpu::exec
