#include "host_kernels/parallel_for.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common/thread_name.h"

namespace tpu::host_kernels {
namespace {

// A worker that finished a job spins this long for the next before it sleeps: a step's kernels
// come back to back (a layer's products, with only short fusions between them), and a sleeping
// worker takes tens of microseconds to wake.
constexpr auto kSpin = std::chrono::microseconds(50);

inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

class Pool {
 public:
  Pool() {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 1; i < cores; ++i) {
      std::thread([this] {  // lives as long as the process
        name_this_thread("tpu_host_pool");
        work();
      }).detach();
    }
    workers_ = cores - 1;
  }

  void run(int64_t n, const std::function<void(int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock() || workers_ == 0 || n < 2) {
      for (int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      active_ = workers_;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    drain();
    std::unique_lock<std::mutex> g(mu_);
    done_.wait(g, [&] { return active_ == 0; });
    fn_ = nullptr;
  }

 private:
  void drain() {
    for (int64_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) (*fn_)(i);
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      auto until = std::chrono::steady_clock::now() + kSpin;
      while (generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until) {
        for (int i = 0; i < 64; ++i) pause();
      }
      {
        std::unique_lock<std::mutex> g(mu_);
        wake_.wait(g, [&] { return generation_.load() != seen; });
        seen = generation_.load();
      }
      drain();
      std::lock_guard<std::mutex> g(mu_);
      if (--active_ == 0) done_.notify_one();
    }
  }

  std::mutex busy_;  // one job at a time
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  unsigned workers_ = 0;
  unsigned active_ = 0;
  std::atomic<uint64_t> generation_{0};
};

}  // namespace

void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  static Pool* pool = new Pool();  // never destroyed: its threads outlive static destruction
  pool->run(n, fn);
}

}  // namespace tpu::host_kernels
