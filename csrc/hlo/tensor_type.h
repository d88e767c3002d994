// Static tensor types of StableHLO values: element type + dimensions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/element_type.h"
#include "common/inline_vector.h"

namespace tpu::hlo {

// Shapes and strides: rarely more than six dimensions, so kept inline (common/inline_vector.h).
using Dims = common::InlineVector<int64_t, 6>;

struct TensorType {
  ElementType dtype = ElementType::kF32;
  Dims dims;

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t numel() const;
  // "tensor<2x3xf32>", "tensor<f32>" for rank 0.
  std::string mlir() const;
  // "float32[2, 3]" for error messages.
  std::string str() const;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && dims == o.dims; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
};

std::string dims_str(const Dims& dims);  // "[2, 3]"

}  // namespace tpu::hlo
