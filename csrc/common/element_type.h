// Element types understood by the torch-free core (hlo/, lowering/, exec/, pjrt/).
// The aten layer maps c10::ScalarType onto these; pjrt/ maps them onto PJRT_Buffer_Type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tpu {

enum class ElementType : uint8_t {
  kBool,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kC64,   // complex<f32>: (real, imag) pairs, as PyTorch's complex64
  kC128,  // complex<f64>
  kC32,   // complex<f16>, PyTorch's complex32: no PJRT or StableHLO type, so stored as the 32 bits
          // of its (real, imag) float16 pair (a U32 buffer, "ui32" in programs). Lowerings never
          // compute on it: values are widened to complex64 when read and narrowed when written
          // (lowering/cast.cc); only ops that move bits unchanged see it (aten/op_runner.cc).
};

// Size of one element in bytes (a bool occupies one byte, as in PyTorch).
size_t element_size(ElementType t);
// The MLIR spelling used in StableHLO tensor types ("f32", "i1", "ui8", ...).
const char* mlir_name(ElementType t);
// A readable name for error messages ("float32", "bool", ...).
const char* display_name(ElementType t);

inline bool is_floating(ElementType t) {
  return t == ElementType::kF16 || t == ElementType::kBF16 || t == ElementType::kF32 ||
         t == ElementType::kF64;
}
inline bool is_complex(ElementType t) { return t == ElementType::kC64 || t == ElementType::kC128; }
// The real type of a complex type's parts (c64 -> f32); `t` itself when not complex.
inline ElementType complex_part(ElementType t) {
  return t == ElementType::kC64 ? ElementType::kF32 : t == ElementType::kC128 ? ElementType::kF64 : t;
}
inline bool is_unsigned(ElementType t) {
  return t == ElementType::kU8 || t == ElementType::kU32 || t == ElementType::kU64;
}
inline bool is_integral(ElementType t) {  // excludes bool and complex (complex32 too)
  return !is_floating(t) && !is_complex(t) && t != ElementType::kBool && t != ElementType::kC32;
}

}  // namespace tpu
