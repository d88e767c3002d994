// A matrix product with a weight pre-packed in column panels, for the XLA CPU plugin: a decode
// step multiplies a few rows by every weight of the model once, and XLA's dot takes each weight
// as a plain operand on every call; this kernel streams weights packed once, at load time.
//
//   stablehlo.custom_call @torch_tpu_packed_matmul(x, w) {api_version = 4}
//
//   x       [M, K]        float32: the rows
//   w       [P, K, 32]    float32: a [K, N] weight's columns in panels of 32 (w[p, k, j] is
//                         column 32 p + j of row k; the last panel is zero-padded, P = ceil(N / 32))
//   result  [M, N]        float32: x @ weight
#pragma once

#include <cstdint>

namespace tpu::host_kernels {

constexpr const char* kPackedMatmul = "torch_tpu_packed_matmul";
constexpr int64_t kPackedPanel = 32;  // the columns of one panel

// The XLA FFI handler (an XLA_FFI_Handler*).
void* packed_matmul_handler();

// y[M, N] = x[M, K] @ (the weight packed in w), over every core, with AVX-512 where the CPU has it
// (`portable`: the plain C++ blocks any CPU runs; the kernel's test checks both).
void packed_matmul(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y, bool portable = false);

}  // namespace tpu::host_kernels
