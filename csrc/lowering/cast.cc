#include "lowering/cast.h"

namespace tpu::lowering {

hlo::Value cast(hlo::Builder& b, hlo::Value v, ElementType to) {
  const ElementType from = b.dtype(v);
  if (from == to) return v;
  if (is_complex(from) && to == ElementType::kBool) {  // true where either part is nonzero, as in PyTorch
    return b.compare(v, b.full(b.type(v), 0), hlo::Compare::kNE);
  }
  if (is_complex(from) && !is_complex(to)) {  // PyTorch keeps the real part; XLA refuses the convert
    hlo::TensorType part = b.type(v);
    part.dtype = complex_part(from);
    return cast(b, b.emit("stablehlo.real", {v}, part), to);
  }
  if (to == ElementType::kBool) {
    return b.compare(v, b.full(b.type(v), 0), hlo::Compare::kNE);
  }
  if (is_floating(from) && is_integral(to) && to != ElementType::kI64) {
    return b.convert(b.convert(v, ElementType::kI64), to);
  }
  return b.convert(v, to);
}

}  // namespace tpu::lowering
