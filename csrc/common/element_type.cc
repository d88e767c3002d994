#include "common/element_type.h"

namespace tpu {

namespace {
struct Info {
  size_t size;
  const char* mlir;
  const char* display;
};

const Info& info(ElementType t) {
  static const Info table[] = {
      {1, "i1", "bool"},      {1, "i8", "int8"},       {2, "i16", "int16"},
      {4, "i32", "int32"},    {8, "i64", "int64"},     {1, "ui8", "uint8"},
      {4, "ui32", "uint32"},  {8, "ui64", "uint64"},   {2, "f16", "float16"},
      {2, "bf16", "bfloat16"}, {4, "f32", "float32"},  {8, "f64", "float64"},
      {8, "complex<f32>", "complex64"}, {16, "complex<f64>", "complex128"}, {4, "ui32", "complex32"},
  };
  return table[static_cast<size_t>(t)];
}
}  // namespace

size_t element_size(ElementType t) { return info(t).size; }
const char* mlir_name(ElementType t) { return info(t).mlir; }
const char* display_name(ElementType t) { return info(t).display; }

}  // namespace tpu
