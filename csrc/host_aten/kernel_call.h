// What every host_aten kernel's FFI handler does around its work.
//
// The XLA CPU plugin calls a custom call on one of its own threads (or on the thread that launched
// the program). Left alone, ATen's CPU kernels (MKL's GEMM, oneDNN, ATen's parallel loops) give that
// thread an OpenMP team of its own; with a second team the process has more OpenMP threads than
// cores, and libgomp then stops spinning between parallel regions in every team, the Python
// thread's included: a 64x128x128 CPU matmul took 84-97 us instead of 16-26 for the rest of the
// process once one program had run a host convolution or a large amax. So the kernels run ATen
// serially and spread large work over the cores themselves, one block per core (for_blocks).
#pragma once

#include <cstdint>
#include <functional>

#include "host_kernels/ffi_call_frame.h"

namespace tpu::host_aten {

// Answers XLA's metadata query, or runs `body` with autograd off and ATen serial on this thread,
// turning an exception into the call's error named after `kernel`.
host_kernels::ffi_abi::Error* run_kernel(host_kernels::ffi_abi::CallFrame* frame, const char* kernel,
                                         void (*body)(const host_kernels::HostCall&));

// Calls fn(block, begin, end) for blocks covering [0, n) - at most one per core, `blocks()` of
// them - on the calling thread and XLA's intra-op pool (inside a kernel call whose plugin offers it,
// host_kernels::HostCall::schedule_on_xla_pool), else host_kernels/parallel_for.h's pool, each with
// autograd off and ATen serial; rethrows the first block's exception here.
int64_t blocks(int64_t n);
void for_blocks(int64_t n, const std::function<void(int64_t block, int64_t begin, int64_t end)>& fn);

// Blocks of the for_blocks jobs spread so far over XLA's pool and over our own (tests, profiling).
struct BlockCounts {
  uint64_t xla_pool = 0;
  uint64_t own_pool = 0;
};
BlockCounts block_counts();

// While alive, ATen's CPU kernels on this thread run on it alone (OpenMP and MKL at one thread);
// the thread's settings come back after.
class SerialAten {
 public:
  SerialAten();
  ~SerialAten();
  SerialAten(const SerialAten&) = delete;
  SerialAten& operator=(const SerialAten&) = delete;

 private:
  int omp_threads_ = 0;
  int mkl_threads_ = 0;
};

}  // namespace tpu::host_aten
