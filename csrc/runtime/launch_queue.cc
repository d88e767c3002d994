#include "runtime/launch_queue.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "runtime/runtime.h"

namespace tpu::runtime {

namespace {

// How long the launcher polls for the next launch before it sleeps: a Python loop of small
// ops pushes one every few microseconds, and waking a sleeping thread costs more than that.
constexpr auto kSpin = std::chrono::microseconds(50);

constexpr uint64_t kNotifyEvery = 64;

std::atomic<uint64_t> pushed_count{0};

void wait_for_launches() { LaunchQueue::get().drain(); }

}  // namespace

LaunchQueue& LaunchQueue::get() {
  // Never destroyed: the launcher may still be waiting for work when the process exits.
  static LaunchQueue* queue = new LaunchQueue();
  return *queue;
}

LaunchQueue::LaunchQueue() {
  const char* v = std::getenv("TORCH_TPU_LAUNCH_THREAD");
  inline_ = v != nullptr && std::strcmp(v, "0") == 0;
  pjrt::Buffer::set_promise_waiter(&wait_for_launches);
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
  std::thread launcher([this] { loop(); });
  launcher_id_ = launcher.get_id();
  launcher.detach();
  // Runs before the static destructors of everything loaded so far (the plugin included).
  std::atexit([] { get().drain(); });
}

void LaunchQueue::push(Launch launch) {
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
  queue_.push_back(std::move(launch));
  ++pushed_;
  pushed_count.fetch_add(1, std::memory_order_release);
  const bool wake = launcher_sleeping_;
  lock.unlock();
  if (wake) work_cv_.notify_one();
}

void LaunchQueue::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = pushed_;
  if (finished_.load() >= target) return;
  if (std::this_thread::get_id() == launcher_id_) {
    throw std::logic_error("torch_tpu: the launcher waited for its own launches");
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

void LaunchQueue::run(Launch& launch) {
  Runtime& rt = Runtime::get();
  WorkTracker& tracker = rt.tracker(launch.device);
  pjrt::LoadedExecutable::Result result;
  try {
    thread_local std::vector<PJRT_Buffer*> args;  // reused: no allocation per launch
    args.clear();
    for (const auto& b : launch.args) args.push_back(b->raw());
    result = launch.exe->execute(args, rt.device(launch.device).raw, launch.non_donatable);
  } catch (const std::exception& e) {
    // An input that failed earlier carries that launch's message already.
    const std::string what = e.what();
    const std::string message = what.rfind("torch_tpu: device error", 0) == 0
                                    ? what
                                    : device_error_message(launch.label, what);
    for (auto& out : launch.outputs) out->fail(message);
    tracker.note_error(message);
    return;
  }
  std::vector<std::shared_ptr<pjrt::Buffer>> keep = std::move(launch.args);  // has room for the outputs
  for (size_t i = 0; i < launch.outputs.size(); ++i) {
    launch.outputs[i]->fulfil(result.outputs[i]->release());
    keep.push_back(std::move(launch.outputs[i]));
  }
  tracker.add(std::shared_ptr<pjrt::Event>(std::move(result.done)), launch.label, std::move(keep));
}

}  // namespace tpu::runtime
