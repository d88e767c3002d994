// Shared argument checks and batch handling of the linear-algebra kernels: matrices arrive
// as [..., m, n] with broadcastable batch dimensions and reach the lowerings as [B, m, n].
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace tpu::aten {

using Dims = std::vector<int64_t>;

// Raises unless `t` is a float32/float64/complex64/complex128 tensor with at least 2 dims (names
// `api` and `arg`).
void check_float_or_complex_matrix(const at::Tensor& t, const char* api, const char* arg = "A");
void check_square(const at::Tensor& t, const char* api, const char* arg = "A");
Dims batch_dims(const at::Tensor& t);
int64_t numel_of(const Dims& d);
// t with batch dims `batch` (broadcast) flattened: [B, rows, cols].
at::Tensor as3d(const at::Tensor& t, const Dims& batch);
// [B, ...] back to batch + [...].
at::Tensor unflatten(const at::Tensor& t3, const Dims& batch);

}  // namespace tpu::aten
