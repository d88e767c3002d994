// Shape rules shared by every lowering: broadcasting, dimension normalisation, keepdim.
#pragma once

#include <vector>

#include "hlo/builder.h"

namespace tpu::lowering {

// PyTorch/numpy broadcast of two shapes; throws std::invalid_argument with PyTorch's message.
hlo::Dims broadcast_shapes(const hlo::Dims& a, const hlo::Dims& b);
// Broadcasts every value to their common shape (rank-0 scalars included).
std::vector<hlo::Value> broadcast_all(hlo::Builder& b, const std::vector<hlo::Value>& values);
// Puts back reduced dims as size 1 ("keepdim").
hlo::Value keep_dims(hlo::Builder& b, hlo::Value reduced, const hlo::Dims& input_dims,
                     const hlo::Dims& reduced_axes);
// A reduced value broadcast back to the input's shape (keepdim + expand).
hlo::Value expand_reduced(hlo::Builder& b, hlo::Value reduced, const hlo::Dims& input_dims,
                          const hlo::Dims& reduced_axes);
// v[i] for a rank-0 integer `i` known only when the program runs (a loop counter): the slice
// at `i` of dimension 0, without that dimension.
hlo::Value index_dim0(hlo::Builder& b, hlo::Value v, hlo::Value i);
// v with v[i] replaced by `row` (shaped like index_dim0's result).
hlo::Value update_dim0(hlo::Builder& b, hlo::Value v, hlo::Value row, hlo::Value i);
// A rank-0 constant of `like`'s element type broadcast to `like`'s shape.
hlo::Value full_like(hlo::Builder& b, hlo::Value like, double value);

}  // namespace tpu::lowering
