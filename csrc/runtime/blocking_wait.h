// A wait for other threads of this process must not hold what those threads need to get there.
// Ranks that run as threads of one process (tests, benchmarks, run_in_threads) meet inside C++
// calls that Python made holding its GIL (PyTorch's Event.record, for example, keeps it while a
// Fused graph with a collective flushes); the peer rank then waits for the GIL and never arrives.
// The Python bindings install hooks that release the GIL for the wait when the thread holds it; the
// core stays free of Python. Without hooks (pure C++ tests) a BlockingWait does nothing.
#pragma once

namespace tpu::runtime {

struct BlockingWaitHooks {
  void* (*begin)() = nullptr;     // returns a token for end (null: nothing was released)
  void (*end)(void* token) = nullptr;
};

// Installed once, when the extension loads.
void set_blocking_wait_hooks(BlockingWaitHooks hooks);

// Scope of a wait for other threads. Construct it before taking any lock the wait holds, so the
// lock is released before the GIL is taken back.
class BlockingWait {
 public:
  BlockingWait();
  ~BlockingWait();
  BlockingWait(const BlockingWait&) = delete;
  BlockingWait& operator=(const BlockingWait&) = delete;

 private:
  void* token_;
};

}  // namespace tpu::runtime
