#include "aten/precision_policy.h"

#include <ATen/Context.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace tpu::aten {
namespace {
std::atomic<bool> g_conv_tf32{false};
// torch.tpu.precision's stack: process-wide, like the TF32 policy, so the backward ops autograd's
// engine issues on its device thread see the block of the thread that ran the forward.
std::mutex g_precision_mu;
std::vector<int> g_precision;
std::atomic<int> g_precision_top{-1};

bool floating(at::ScalarType t) { return at::isFloatingType(t); }

// The override as an attribute; returns whether one is active.
bool mark_override(OpRunner& r, at::ScalarType dtype) {
  const int p = g_precision_top.load(std::memory_order_acquire);
  if (p < 0 || !floating(dtype)) return false;
  r.attrs().set_int("precision", p);
  return true;
}
}  // namespace

void push_precision(int precision) {
  if (precision < 0 || precision > 2) {
    throw std::invalid_argument("torch.tpu.precision: expected Precision.DEFAULT, HIGH or HIGHEST, got " +
                                std::to_string(precision));
  }
  std::lock_guard<std::mutex> lock(g_precision_mu);
  g_precision.push_back(precision);
  g_precision_top.store(precision, std::memory_order_release);
}

void pop_precision() {
  std::lock_guard<std::mutex> lock(g_precision_mu);
  if (!g_precision.empty()) g_precision.pop_back();
  g_precision_top.store(g_precision.empty() ? -1 : g_precision.back(), std::memory_order_release);
}

int precision_override() { return g_precision_top.load(std::memory_order_acquire); }

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
