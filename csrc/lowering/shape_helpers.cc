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

namespace {
// Start indices (i, 0, 0, ...) for a dynamic slice of a rank-`rank` value.
std::vector<hlo::Value> dim0_starts(hlo::Builder& b, hlo::Value i, size_t rank) {
  std::vector<hlo::Value> starts(rank, b.constant_int(b.dtype(i), 0));
  starts[0] = i;
  return starts;
}
}  // namespace

hlo::Value index_dim0(hlo::Builder& b, hlo::Value v, hlo::Value i) {
  hlo::Dims sizes = b.dims(v);
  sizes[0] = 1;
  const hlo::Dims row(sizes.begin() + 1, sizes.end());
  return b.reshape(b.dynamic_slice(v, dim0_starts(b, i, sizes.size()), sizes), row);
}

hlo::Value update_dim0(hlo::Builder& b, hlo::Value v, hlo::Value row, hlo::Value i) {
  hlo::Dims sizes = b.dims(row);
  sizes.insert(sizes.begin(), 1);
  return b.dynamic_update_slice(v, b.reshape(row, sizes), dim0_starts(b, i, sizes.size()));
}

}  // namespace tpu::lowering
