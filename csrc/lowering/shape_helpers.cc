#include "lowering/shape_helpers.h"

#include <stdexcept>
#include <string>

namespace tpu::lowering {

hlo::Dims broadcast_shapes(const hlo::Dims& a, const hlo::Dims& b) {
  const size_t n = std::max(a.size(), b.size());
  hlo::Dims out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw std::invalid_argument("The size of tensor a (" + std::to_string(da) +
                                  ") must match the size of tensor b (" + std::to_string(db) +
                                  ") at non-singleton dimension " + std::to_string(i));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<hlo::Value> broadcast_all(hlo::Builder& b, const std::vector<hlo::Value>& values) {
  hlo::Dims shape;
  for (hlo::Value v : values) shape = broadcast_shapes(shape, b.dims(v));
  std::vector<hlo::Value> out;
  for (hlo::Value v : values) out.push_back(b.broadcast_to(v, shape));
  return out;
}

hlo::Value keep_dims(hlo::Builder& b, hlo::Value reduced, const hlo::Dims& input_dims,
                     const hlo::Dims& reduced_axes) {
  hlo::Dims shape = input_dims;
  for (int64_t d : reduced_axes) shape[d] = 1;
  return b.reshape(reduced, shape);
}

hlo::Value expand_reduced(hlo::Builder& b, hlo::Value reduced, const hlo::Dims& input_dims,
                          const hlo::Dims& reduced_axes) {
  hlo::Dims identity(input_dims.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int64_t>(i);
  return b.broadcast_in_dim(keep_dims(b, reduced, input_dims, reduced_axes), input_dims, identity);
}

hlo::Value full_like(hlo::Builder& b, hlo::Value like, double value) {
  return b.full(b.type(like), value);
}

}  // namespace tpu::lowering
