// The size, in multiply-adds, from which an op takes its host kernel instead of XLA's code
// (conv_kernel.h, lstm_kernel.h): read once from an environment variable, else a default;
// settable for tests and A/B runs (programs already compiled keep their choice).
#pragma once

#include <atomic>

namespace tpu::host_aten {

class MacsThreshold {
 public:
  // `env`: the variable's name (a number >= 0; anything else throws a message naming the fix).
  MacsThreshold(const char* env, double fallback);
  double get() const { return value_.load(std::memory_order_relaxed); }
  // Returns the previous value.
  double set(double macs) { return value_.exchange(macs, std::memory_order_relaxed); }

 private:
  std::atomic<double> value_;
};

}  // namespace tpu::host_aten
