#include "lowering/pivot_search.h"

#include <cmath>

#include "lowering/pointwise.h"

namespace tpu::lowering {

hlo::Value pivot_size(hlo::Builder& b, hlo::Value x) {
  if (!is_complex(b.dtype(x))) return b.unary("stablehlo.abs", x);
  return b.add(b.unary("stablehlo.abs", real_part(b, x)), b.unary("stablehlo.abs", imag_part(b, x)));
}

std::pair<hlo::Value, hlo::Value> first_largest(hlo::Builder& b, hlo::Value sizes) {
  using hlo::Compare;
  const hlo::Dims d = b.dims(sizes);
  auto best = b.reduce_multi(
      {sizes, b.iota(hlo::TensorType{ElementType::kI64, d}, 1)},
      {b.constant(b.dtype(sizes), -INFINITY), b.constant_int(ElementType::kI64, d[1])}, {1},
      [&](const std::vector<hlo::Value>& v) {
        hlo::Value more = b.compare(v[2], v[0], Compare::kGT);
        hlo::Value tie = logical_and(b, b.compare(v[2], v[0], Compare::kEQ), b.compare(v[3], v[1], Compare::kLT));
        hlo::Value take = logical_or(b, more, tie);
        return std::vector<hlo::Value>{b.select(take, v[2], v[0]), b.select(take, v[3], v[1])};
      });
  return {best[0], best[1]};
}

}  // namespace tpu::lowering
