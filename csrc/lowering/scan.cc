#include "lowering/scan.h"

namespace tpu::lowering {

hlo::Value inclusive_scan(hlo::Builder& b, hlo::Value x, int64_t dim, hlo::Value identity,
                          const std::function<hlo::Value(hlo::Value, hlo::Value)>& combine) {
  const hlo::Dims d = b.dims(x);
  const int64_t n = d[dim];
  for (int64_t k = 1; k < n; k *= 2) {
    hlo::Dims start(d.size(), 0), limit = d, strides(d.size(), 1), low(d.size(), 0), high(d.size(), 0),
        interior(d.size(), 0);
    limit[dim] = n - k;
    low[dim] = k;
    hlo::Value shifted = b.pad(b.slice(x, start, limit, strides), identity, low, high, interior);
    x = combine(shifted, x);
  }
  return x;
}

hlo::Value inclusive_scan(hlo::Builder& b, hlo::Value x, int64_t dim, hlo::ReduceKind kind) {
  const bool prod = kind == hlo::ReduceKind::kProd;
  return inclusive_scan(b, x, dim, b.constant(b.dtype(x), prod ? 1 : 0),
                        [&](hlo::Value earlier, hlo::Value later) { return prod ? b.mul(earlier, later) : b.add(earlier, later); });
}

}  // namespace tpu::lowering
