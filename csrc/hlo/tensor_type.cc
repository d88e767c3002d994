#include "hlo/tensor_type.h"

namespace tpu::hlo {

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string TensorType::mlir() const {
  std::string s = "tensor<";
  for (int64_t d : dims) s += std::to_string(d) + "x";
  s += mlir_name(dtype);
  s += ">";
  return s;
}

std::string dims_str(const Dims& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string TensorType::str() const { return std::string(display_name(dtype)) + dims_str(dims); }

}  // namespace tpu::hlo
