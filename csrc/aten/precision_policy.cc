#include "aten/precision_policy.h"

#include <ATen/Context.h>

#include <atomic>

namespace tpu::aten {
namespace {
std::atomic<bool> g_conv_tf32{false};
}  // namespace

// The per-backend query (not allowTF32CuBLAS, which throws once the legacy and the new
// fp32_precision APIs were both used); legacy setters update it too.
bool matmul_allows_tf32() {
  return at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL) ==
         at::Float32Precision::TF32;
}
bool conv_allows_tf32() { return g_conv_tf32.load(std::memory_order_relaxed); }
void set_conv_allows_tf32(bool allow) { g_conv_tf32.store(allow, std::memory_order_relaxed); }

// Only set when true, so the default programs (and their cache keys) stay as they were.
void mark_matmul_precision(OpRunner& r, at::ScalarType dtype) {
  if (dtype == at::kFloat && matmul_allows_tf32()) r.attrs().set_bool("tf32", true);
}

void mark_conv_precision(OpRunner& r, at::ScalarType dtype) {
  if (dtype == at::kFloat && conv_allows_tf32()) r.attrs().set_bool("tf32", true);
}

}  // namespace tpu::aten
