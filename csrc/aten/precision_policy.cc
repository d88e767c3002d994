#include "aten/precision_policy.h"

#include <ATen/Context.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace tpu::aten {
namespace {
std::atomic<bool> g_conv_tf32{false};
thread_local std::vector<int> t_precision;

bool floating(at::ScalarType t) { return at::isFloatingType(t); }

// The override as an attribute; returns whether one is active.
bool mark_override(OpRunner& r, at::ScalarType dtype) {
  if (t_precision.empty() || !floating(dtype)) return false;
  r.attrs().set_int("precision", t_precision.back());
  return true;
}
}  // namespace

void push_precision(int precision) {
  if (precision < 0 || precision > 2) {
    throw std::invalid_argument("torch.tpu.precision: expected Precision.DEFAULT, HIGH or HIGHEST, got " +
                                std::to_string(precision));
  }
  t_precision.push_back(precision);
}

void pop_precision() {
  if (!t_precision.empty()) t_precision.pop_back();
}

int precision_override() { return t_precision.empty() ? -1 : t_precision.back(); }

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
  if (mark_override(r, dtype)) return;
  if (dtype == at::kFloat && matmul_allows_tf32()) r.attrs().set_bool("tf32", true);
}

void mark_conv_precision(OpRunner& r, at::ScalarType dtype) {
  if (mark_override(r, dtype)) return;
  if (dtype == at::kFloat && conv_allows_tf32()) r.attrs().set_bool("tf32", true);
}

}  // namespace tpu::aten
