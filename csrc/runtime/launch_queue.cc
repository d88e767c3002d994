#include "runtime/launch_queue.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>

#include "common/thread_name.h"
#include "profiler/trace_hooks.h"
#include "runtime/blocking_wait.h"
#include "runtime/group_launcher.h"
#include "runtime/runtime.h"
#include "runtime/work_tracker.h"

namespace tpu::runtime {

namespace {

// How long the launcher polls for the next launch before it sleeps: a Python loop of small
// ops pushes one every few microseconds, and waking a sleeping thread costs more than that.
constexpr auto kSpin = std::chrono::microseconds(50);

constexpr uint64_t kNotifyEvery = 64;

std::atomic<uint64_t> pushed_count{0};
std::atomic<uint64_t> execute_calls{0};
std::atomic<uint64_t> execute_ns{0};
thread_local uint64_t t_execute_ns = 0;  // this thread's share (replays run Execute inline)

uint64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A promised buffer: made by a queued launch (the queue drains first), or by a launch that meets
// other ranks (runtime/group_launcher.h) - which a queued launch may read, so the launcher thread
// waits for the buffer alone.
void wait_for_launches(const pjrt::Buffer& promised) {
  LaunchQueue& queue = LaunchQueue::get();
  if (!queue.on_launcher_thread()) queue.drain();
  GroupLauncher::await_resolved(promised);
}

// Installed when the library loads, not with the queue: a group launch may promise buffers (a
// program with collectives as a process's first launch) before anything created the queue, and
// a read of one must wait for it rather than find it unproduced.
const bool kPromiseWaiterInstalled = [] {
  pjrt::Buffer::set_promise_waiter(&wait_for_launches);
  return true;
}();

// While profiling: reports the execution once its completion event is ready.
void trace_execution(pjrt::Event& done, const Launch& launch, int64_t launch_ns) {
  profiler::ExecutionRecord record;
  record.label = launch.label;
  record.device = launch.device;
  // Queued launches carry their op; a program launched on the calling thread (fused flushes,
  // compiled graphs, collectives) belongs to the op running there now.
  record.correlation = launch.correlation ? launch.correlation : profiler::sink().current_correlation();
  record.launch_ns = launch_ns;
  record.launch_id = launch.launch_id;
  if (launch.exe) record.program = launch.exe->name();
  profiler::sink().execution_launched();
  try {
    done.on_ready([record](const pjrt::ErrorInfo* error) mutable {
      record.done_ns = profiler::now_ns();
      record.failed = error != nullptr;
      profiler::sink().execution(record);
    });
  } catch (const std::exception&) {
    // A plugin without completion callbacks: the execution goes unprofiled, never fails.
    profiler::sink().execution_dropped();
  }
}

}  // namespace

LaunchQueue& LaunchQueue::get() {
  // Never destroyed: the launcher may still be waiting for work when the process exits.
  static LaunchQueue* queue = new LaunchQueue();
  return *queue;
}

LaunchQueue::LaunchQueue() {
  const char* v = std::getenv("TORCH_TPU_LAUNCH_THREAD");
  inline_ = v != nullptr && std::strcmp(v, "0") == 0;
  // A forked child has no launcher thread (and cannot use the parent's PJRT client): it runs
  // launches inline. The queue's lock is held across fork so the child never inherits it locked.
  pthread_atfork([] { get().mu_.lock(); }, [] { get().mu_.unlock(); },
                 [] {
                   LaunchQueue& q = get();
                   // The parent's queued launches are the parent's; never run or free them here.
                   new std::deque<Launch>(std::move(q.queue_));
                   q.finished_.store(q.pushed_);
                   q.started_ = false;
                   q.inline_ = true;
                   q.mu_.unlock();
                 });
}

void LaunchQueue::start_locked() {
  started_ = true;
  std::thread launcher([this] {
    name_this_thread("tpu_launcher");
    loop();
  });
  launcher_id_ = launcher.get_id();
  launcher.detach();
  // Runs before the static destructors of everything loaded so far (the plugin included).
  std::atexit([] { get().drain(); });
}

void LaunchQueue::push(Launch launch) {
  if (queue_behind_group(launch)) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (inline_) {
    ++inlined_;
    lock.unlock();
    run(launch);
    return;
  }
  if (!started_) start_locked();
  if (pushed_ - finished_.load() >= kMaxQueued) {
    // Full: wait until half of it has been launched (not one wake-up per launch).
    ++waiters_;
    done_cv_.wait(lock, [&] { return pushed_ - finished_.load() <= kMaxQueued / 2; });
    --waiters_;
  }
  launch.queued = true;
  if (profiler::host_spans()) launch.queued_ns = profiler::now_ns();
  for (size_t i = launch.num_args; i < launch.buffers.size(); ++i) launch.buffers[i]->hold_while_defined();
  queue_.push_back(std::move(launch));
  ++pushed_;
  pushed_count.fetch_add(1, std::memory_order_release);
  const bool wake = launcher_sleeping_;
  lock.unlock();
  if (wake) work_cv_.notify_one();
}

void LaunchQueue::drain() {
  std::optional<BlockingWait> waiting;  // declared first: the GIL is taken back after the lock is released
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = pushed_;
  if (finished_.load() >= target) return;
  if (std::this_thread::get_id() == launcher_id_) {
    throw std::logic_error("torch_tpu: the launcher waited for its own launches");
  }
  // A queued launch may wait for a program that meets other ranks (runtime/group_launcher.h),
  // whose peers may be threads of this process that need the GIL: release it while waiting.
  if (GroupLauncher::any_pending()) {
    lock.unlock();
    waiting.emplace();
    lock.lock();
  }
  ++waiters_;
  done_cv_.wait(lock, [&] { return finished_.load() >= target; });
  --waiters_;
}

LaunchQueue::Stats LaunchQueue::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return Stats{pushed_, inlined_};
}

bool LaunchQueue::empty() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_.load() == pushed_;
}

void LaunchQueue::loop() {
  uint64_t taken = 0;
  std::deque<Launch> batch;
  for (;;) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    while (pushed_count.load(std::memory_order_acquire) == taken &&
           std::chrono::steady_clock::now() < spin_until) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    {
      // Takes everything queued at once: one lock per batch, not per launch.
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty()) {
        launcher_sleeping_ = true;
        work_cv_.wait(lock, [&] { return !queue_.empty(); });
        launcher_sleeping_ = false;
      }
      batch.swap(queue_);
    }
    taken += batch.size();
    for (size_t i = 0; i < batch.size(); ++i) {
      run(batch[i]);
      batch[i] = Launch{};  // the tracker holds what must stay alive
      // finished_ before waiters_ (both sequentially consistent): a waiter that registered
      // after this check sees the new count before it sleeps. Waiters (drains, pushers of a
      // full queue) are woken every kNotifyEvery launches and at the end of each batch.
      const uint64_t finished = finished_.fetch_add(1) + 1;
      if ((finished % kNotifyEvery == 0 || i + 1 == batch.size()) && waiters_.load() > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_all();
      }
    }
    batch.clear();
  }
}

std::shared_ptr<pjrt::Event> launch_now(Launch& launch) {
  Runtime& rt = Runtime::get();
  // Reused per thread: no allocation per launch on this path.
  thread_local std::vector<PJRT_Buffer*> args;
  thread_local std::vector<PJRT_Buffer*> outputs;
  PJRT_Event* done = nullptr;
  const size_t num_outputs = launch.buffers.size() - launch.num_args;
  const bool traced = profiler::tracing();
  const int64_t launch_ns = traced ? profiler::now_ns() : 0;
  if (traced && launch.queued_ns != 0 && profiler::host_spans()) {
    profiler::sink().host_span("launch_queue", launch.queued_ns, launch_ns, launch.correlation);
  }
  auto end_queue_holds = [&] {  // the tracker holds the outputs from here (or they failed)
    if (!launch.queued) return;
    launch.queued = false;
    for (size_t i = 0; i < num_outputs; ++i) launch.buffers[launch.num_args + i]->release_defined_hold();
  };
  try {
    args.clear();
    for (size_t i = 0; i < launch.num_args; ++i) args.push_back(launch.buffers[i]->raw());
    outputs.assign(num_outputs, nullptr);
    const uint64_t start = steady_ns();
    done = launch.exe->execute_raw(args.data(), args.size(), rt.device(launch.device).raw,
                                   launch.non_donatable, outputs.data(), launch.launch_id);
    const uint64_t inside = steady_ns() - start;
    if (traced && profiler::host_spans()) {
      // A queued launch runs on the launcher thread, beside the threads issuing ops.
      profiler::sink().host_span(launch.queued ? "launcher_execute" : "pjrt_execute", launch_ns, profiler::now_ns(),
                                 launch.correlation);
    }
    execute_ns.fetch_add(inside, std::memory_order_relaxed);
    t_execute_ns += inside;
    execute_calls.fetch_add(1, std::memory_order_relaxed);
  } catch (const std::exception& e) {
    // An input that failed earlier carries that launch's message already.
    const std::string what = e.what();
    const std::string message =
        is_device_error_message(what) ? what : device_error_message(launch.label, what);
    for (size_t i = 0; i < num_outputs; ++i) launch.buffers[launch.num_args + i]->fail(message);
    end_queue_holds();
    throw std::runtime_error(message);
  }
  for (size_t i = 0; i < num_outputs; ++i) launch.buffers[launch.num_args + i]->fulfil(outputs[i]);
  end_queue_holds();
  if (done == nullptr) return nullptr;
  auto event = std::make_shared<pjrt::Event>(launch.exe->api(), done);
  if (traced) trace_execution(*event, launch, launch_ns);
  rt.tracker(launch.device).add(event, launch.label, std::move(launch.buffers), launch.num_args);
  return event;
}

uint64_t execute_ns_on_this_thread() { return t_execute_ns; }

ExecuteCallStats execute_call_stats() {
  return ExecuteCallStats{execute_calls.load(std::memory_order_relaxed), execute_ns.load(std::memory_order_relaxed)};
}

void LaunchQueue::run(Launch& launch) {
  try {
    launch_now(launch);
  } catch (const std::exception& e) {
    // Its outputs carry the error; the next synchronize reports it.
    Runtime::get().tracker(launch.device).note_error(e.what());
  }
}

}  // namespace tpu::runtime
