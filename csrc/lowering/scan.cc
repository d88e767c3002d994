#include "lowering/scan.h"

namespace tpu::lowering {

hlo::Value inclusive_scan(hlo::Builder& b, hlo::Value x, int64_t dim, hlo::ReduceKind kind) {
  const hlo::Dims d = b.dims(x);
  const int64_t n = d[dim];
  const bool prod = kind == hlo::ReduceKind::kProd;
  hlo::Value identity = b.constant(b.dtype(x), prod ? 1 : 0);
  for (int64_t k = 1; k < n; k *= 2) {
    hlo::Dims start(d.size(), 0), limit = d, strides(d.size(), 1), low(d.size(), 0), high(d.size(), 0),
        interior(d.size(), 0);
    limit[dim] = n - k;
    low[dim] = k;
    hlo::Value shifted = b.pad(b.slice(x, start, limit, strides), identity, low, high, interior);
    x = prod ? b.mul(x, shifted) : b.add(x, shifted);
  }
  return x;
}

}  // namespace tpu::lowering
