// The launch queue: Strict and Debug Eager hand each per-op execution to one launcher thread
// instead of calling PJRT on the Python thread, so an op returns as soon as its program is
// found and its outputs are promised (pjrt/buffer.h), and the host prepares the next op while
// PJRT starts this one - the way a CUDA launch queue decouples Python from the driver.
//
// Launches run in the order they were pushed. The launcher fulfils each launch's output
// buffers and records its completion (with the buffers it must keep alive) in the device's
// WorkTracker. A launch that PJRT refuses fails its outputs and leaves the error, naming the
// op, for the next synchronize. Anything that needs a promised buffer waits for the queue to
// drain (drain is also the first step of every synchronize).
//
// TORCH_TPU_LAUNCH_THREAD=0 launches inline on the calling thread instead (read once).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "pjrt/buffer.h"
#include "pjrt/executable.h"

namespace tpu::runtime {

struct Launch {
  std::shared_ptr<pjrt::LoadedExecutable> exe;
  // The program's arguments (read, maybe donated) followed by its promised outputs, which
  // the launch fulfils; all of them stay alive until the execution has finished.
  std::vector<std::shared_ptr<pjrt::Buffer>> buffers;
  size_t num_args = 0;
  std::vector<int64_t> non_donatable;
  int device = 0;
  const char* label = "";  // the op, for error messages
  uint64_t correlation = 0;  // while profiling: the CPU op that queued it (profiler/trace_hooks.h)
  // A program with collectives: the id every rank's part of this launch passes to PJRT (0: none).
  int launch_id = 0;
  // Queued: its outputs count as held while defined (pjrt::Buffer::defining_holds) from the push
  // until the tracker takes them, so the next op may take one over (PJRT orders the two).
  bool queued = false;
  int64_t queued_ns = 0;  // while profiling with host spans: when it was queued
};

// Hands `launch` to PJRT on the calling thread now: fulfils its outputs and gives the completion
// event, with every buffer of the launch, to the device's WorkTracker. On failure its outputs
// are failed and std::runtime_error naming the op is thrown. (The launcher runs each queued
// launch through this; whole programs - fused flushes, compiled-graph replays - call it
// directly.) Returns the execution's completion event (null if the plugin gives none).
std::shared_ptr<pjrt::Event> launch_now(Launch& launch);

// Calls into PJRT's Execute and the wall time spent inside them, over all launches (benchmarks
// separate our host work from the plugin's: the XLA CPU plugin runs small programs inline).
struct ExecuteCallStats {
  uint64_t calls = 0;
  uint64_t nanoseconds = 0;
};
ExecuteCallStats execute_call_stats();
// The nanoseconds of those calls made on the calling thread (a compiled-graph replay's own share,
// without the launcher thread's concurrent launches).
uint64_t execute_ns_on_this_thread();

class LaunchQueue {
 public:
  static LaunchQueue& get();

  // Queues `launch` (waits while kMaxQueued launches are queued).
  void push(Launch launch);
  // Returns once every launch pushed so far has been handed to PJRT.
  void drain();
  bool empty();
  bool on_launcher_thread() const { return std::this_thread::get_id() == launcher_id_; }

  struct Stats {
    uint64_t queued = 0;  // launches run by the launcher thread
    uint64_t inlined = 0;  // launches run on the pushing thread (TORCH_TPU_LAUNCH_THREAD=0, fork)
  };
  Stats stats();

  static constexpr size_t kMaxQueued = 1024;

 private:
  LaunchQueue();
  void start_locked();
  void loop();
  static void run(Launch& launch);

  std::mutex mu_;
  std::condition_variable work_cv_;  // the launcher waits for launches
  std::condition_variable done_cv_;  // pushers (queue full) and drainers wait for progress
  std::deque<Launch> queue_;  // pushed, not yet taken by the launcher
  uint64_t pushed_ = 0;
  std::atomic<uint64_t> finished_{0};
  bool launcher_sleeping_ = false;
  std::atomic<int> waiters_{0};  // threads waiting on done_cv_
  bool started_ = false;
  bool inline_ = false;
  uint64_t inlined_ = 0;
  std::thread::id launcher_id_;
};

}  // namespace tpu::runtime
