// A small worker pool for host kernels: the XLA CPU plugin calls a custom call on one of its
// threads, and a kernel on the step's critical path should use every core. One job runs at a
// time; a caller that finds the pool busy (another program's kernel on another device) runs
// its job inline instead of waiting.
#pragma once

#include <cstdint>
#include <functional>

namespace tpu::host_kernels {

// Calls fn(i) for i in [0, n), spread over the pool's threads and the caller; returns when all
// calls have returned.
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

}  // namespace tpu::host_kernels
