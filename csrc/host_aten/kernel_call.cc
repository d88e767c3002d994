#include "host_aten/kernel_call.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "host_kernels/parallel_for.h"

// From the runtimes PyTorch's CPU library loads (libgomp, its static MKL); weak, so a PyTorch build
// without one leaves that runtime's threading alone.
extern "C" {
int omp_get_max_threads() __attribute__((weak));
void omp_set_num_threads(int) __attribute__((weak));
int MKL_Set_Num_Threads_Local(int) __attribute__((weak));  // mkl_set_num_threads_local in mkl.h
}

namespace tpu::host_aten {

SerialAten::SerialAten() {
  // ATen sets a thread's OpenMP and MKL thread counts on its first parallel work there;
  // get_num_threads() does that now, so it cannot undo what follows.
  (void)at::get_num_threads();
  if (omp_get_max_threads != nullptr && omp_set_num_threads != nullptr) {
    omp_threads_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
  if (MKL_Set_Num_Threads_Local != nullptr) mkl_threads_ = MKL_Set_Num_Threads_Local(1);
}

SerialAten::~SerialAten() {
  if (omp_threads_ > 0) omp_set_num_threads(omp_threads_);
  if (MKL_Set_Num_Threads_Local != nullptr) MKL_Set_Num_Threads_Local(mkl_threads_);  // 0: MKL's global again
}

host_kernels::ffi_abi::Error* run_kernel(host_kernels::ffi_abi::CallFrame* frame, const char* kernel,
                                         void (*body)(const host_kernels::HostCall&)) {
  host_kernels::HostCall call(frame);
  if (call.answered_metadata() || !call.executing()) return nullptr;
  try {
    SerialAten serial;
    c10::InferenceMode no_autograd;
    body(call);
  } catch (const std::exception& e) {
    return call.fail(std::string(kernel) + ": " + e.what());
  }
  return nullptr;
}

int64_t blocks(int64_t n) {
  static const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max<int64_t>(1, std::min(n, cores));
}

void for_blocks(int64_t n, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  const int64_t count = blocks(n);
  std::mutex mu;
  std::exception_ptr failed;
  host_kernels::parallel_for(count, [&](int64_t block) {
    try {
      SerialAten serial;
      c10::InferenceMode no_autograd;  // the pool's threads have their own modes
      fn(block, n * block / count, n * (block + 1) / count);
    } catch (...) {
      std::lock_guard<std::mutex> g(mu);
      if (!failed) failed = std::current_exception();
    }
  });
  if (failed) std::rethrow_exception(failed);
}

}  // namespace tpu::host_aten
