// The eigen-decomposition of general (non-symmetric) square matrices, for the XLA CPU plugin: the
// plugin has no general eig, so this kernel calls the LAPACK routine PyTorch's CPU linalg.eig
// calls (?geev, from the LAPACK the process already loaded with libtorch), and gives the same
// results: eigenvalues in LAPACK's order, eigenvectors normalised as LAPACK normalises them.
//
//   stablehlo.custom_call @torch_tpu_eig(a) {api_version = 4, backend_config = {vectors = 0|1 : i64}}
//
//   a       [B, n, n]  float32 / float64 / complex64 / complex128 (row-major)
//   w       [B, n]     the complex eigenvalues (complex64 for float32 and complex64 input)
//   v       [B, n, n]  with vectors = 1: the eigenvectors as columns (v[b, :, j] belongs to w[b, j])
//
// A matrix with a NaN or infinity, or on which LAPACK does not converge, fails the program with
// the message PyTorch's CPU gives. Registered only when the LAPACK routines are found.
#pragma once

namespace tpu::host_kernels {

constexpr const char* kEig = "torch_tpu_eig";

// The XLA FFI handler (an XLA_FFI_Handler*).
void* eig_handler();
// Whether the process has the LAPACK routines the kernel calls.
bool eig_available();

}  // namespace tpu::host_kernels
