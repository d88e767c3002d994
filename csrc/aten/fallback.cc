// Ops without a tpu lowering run on the CPU: inputs are copied to the host, the CPU kernel
// runs, results are copied back (in-place results into the original tpu tensors). Each op
// warns once and is counted; TORCH_TPU_FALLBACK=error (or torch_tpu.set_fallback_mode)
// raises instead.
#include "aten/fallback.h"
#include "aten/complex_support.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace tpu::aten {

namespace {
std::mutex g_mu;
std::map<std::string, int64_t> g_counts;
FallbackMode g_mode = [] {
  const char* v = std::getenv("TORCH_TPU_FALLBACK");
  return (v != nullptr && std::string(v) == "error") ? FallbackMode::kError : FallbackMode::kWarn;
}();

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.schema().operator_name();
  const std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  bool first = false;
  FallbackMode mode;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    mode = g_mode;
    if (mode != FallbackMode::kError) first = g_counts[full]++ == 0;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(
      mode != FallbackMode::kError, "torch_tpu has no tpu lowering for '", full,
      "', and the CPU fallback is disabled (TORCH_TPU_FALLBACK=error). Fix: allow the fallback "
      "with torch_tpu.set_fallback_mode('warn'), or avoid this op.");
  if (first) {
    TORCH_WARN("torch_tpu: '", full, "' has no tpu lowering yet, so it runs on the CPU (its tpu "
               "inputs and outputs are copied). Shown once per op; torch_tpu.fallback_counts() "
               "lists every op that fell back.");
  }
  at::native::cpu_fallback(op, stack);
}
}  // namespace

std::map<std::string, int64_t> fallback_counts() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_counts;
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_counts.clear();
}

void set_fallback_mode(FallbackMode mode) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_mode = mode;
}

FallbackMode fallback_mode() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_mode;
}

void run_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { cpu_fallback(op, stack); }

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace tpu::aten
