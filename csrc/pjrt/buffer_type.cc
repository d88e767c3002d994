#include "pjrt/buffer_type.h"

#include <stdexcept>
#include <string>

namespace tpu::pjrt {

PJRT_Buffer_Type to_pjrt(ElementType t) {
  switch (t) {
    case ElementType::kBool: return PJRT_Buffer_Type_PRED;
    case ElementType::kI8: return PJRT_Buffer_Type_S8;
    case ElementType::kI16: return PJRT_Buffer_Type_S16;
    case ElementType::kI32: return PJRT_Buffer_Type_S32;
    case ElementType::kI64: return PJRT_Buffer_Type_S64;
    case ElementType::kU8: return PJRT_Buffer_Type_U8;
    case ElementType::kU32: return PJRT_Buffer_Type_U32;
    case ElementType::kU64: return PJRT_Buffer_Type_U64;
    case ElementType::kF16: return PJRT_Buffer_Type_F16;
    case ElementType::kBF16: return PJRT_Buffer_Type_BF16;
    case ElementType::kF32: return PJRT_Buffer_Type_F32;
    case ElementType::kF64: return PJRT_Buffer_Type_F64;
    case ElementType::kC64: return PJRT_Buffer_Type_C64;
    case ElementType::kC128: return PJRT_Buffer_Type_C128;
    case ElementType::kC32: return PJRT_Buffer_Type_U32;  // its bits
  }
  return PJRT_Buffer_Type_INVALID;
}

ElementType from_pjrt(PJRT_Buffer_Type t) {
  switch (t) {
    case PJRT_Buffer_Type_PRED: return ElementType::kBool;
    case PJRT_Buffer_Type_S8: return ElementType::kI8;
    case PJRT_Buffer_Type_S16: return ElementType::kI16;
    case PJRT_Buffer_Type_S32: return ElementType::kI32;
    case PJRT_Buffer_Type_S64: return ElementType::kI64;
    case PJRT_Buffer_Type_U8: return ElementType::kU8;
    case PJRT_Buffer_Type_U32: return ElementType::kU32;
    case PJRT_Buffer_Type_U64: return ElementType::kU64;
    case PJRT_Buffer_Type_F16: return ElementType::kF16;
    case PJRT_Buffer_Type_BF16: return ElementType::kBF16;
    case PJRT_Buffer_Type_F32: return ElementType::kF32;
    case PJRT_Buffer_Type_F64: return ElementType::kF64;
    case PJRT_Buffer_Type_C64: return ElementType::kC64;
    case PJRT_Buffer_Type_C128: return ElementType::kC128;
    default: break;
  }
  throw std::invalid_argument("unsupported PJRT buffer type " + std::to_string(int(t)));
}

}  // namespace tpu::pjrt
