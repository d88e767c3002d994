#include "runtime/group_launcher.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>

#include "common/thread_name.h"
#include "runtime/blocking_wait.h"

namespace tpu::runtime {
namespace {

std::mutex g_launchers_mu;
std::map<int, GroupLauncher*>& launchers() {
  static auto* all = new std::map<int, GroupLauncher*>();  // never destroyed (threads may wait)
  return *all;
}

// Signalled after every task: the readers of promised buffers wait on it.
std::mutex g_resolved_mu;
std::condition_variable g_resolved_cv;
std::atomic<int64_t> g_pending{0};  // tasks pushed and not yet run, all devices

// Tasks run on the pushing thread: asked for, or in a forked child (no launcher threads there).
bool run_inline() {
  static const bool asked = [] {
    const char* v = std::getenv("TORCH_TPU_GROUP_LAUNCH_THREAD");
    return v != nullptr && std::strcmp(v, "0") == 0;
  }();
  static const pid_t parent = getpid();
  return asked || getpid() != parent;
}

void run_task(std::function<void()>& task) {
  try {
    task();
  } catch (const std::exception&) {
    // The task failed the outputs it promised; their readers get the error.
  }
  task = nullptr;  // what it holds is released before its readers are told
  {
    std::lock_guard<std::mutex> lock(g_resolved_mu);
    g_pending.fetch_sub(1);
  }
  g_resolved_cv.notify_all();
}

}  // namespace

GroupLauncher& GroupLauncher::of(int device) {
  std::lock_guard<std::mutex> lock(g_launchers_mu);
  GroupLauncher*& slot = launchers()[device];
  if (slot == nullptr) {
    slot = new GroupLauncher();
    static const bool registered = [] {
      std::atexit(&GroupLauncher::drain_all);  // before the plugin's static destructors
      return true;
    }();
    (void)registered;
  }
  return *slot;
}

void GroupLauncher::push(std::function<void()> task) {
  g_pending.fetch_add(1);
  if (run_inline()) {
    run_task(task);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!started_) {
    started_ = true;
    std::thread thread([this] {
      name_this_thread("tpu_group");
      loop();
    });
    thread_id_ = thread.get_id();
    thread.detach();
  }
  queue_.push_back(std::move(task));
  ++pushed_;
  lock.unlock();
  work_cv_.notify_one();
}

void GroupLauncher::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return !queue_.empty(); });
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    run_task(task);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++finished_;
    }
    done_cv_.notify_all();
  }
}

void GroupLauncher::drain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ == pushed_) return;
  }
  if (on_launcher_thread()) throw std::logic_error("torch_tpu: the group launcher waited for its own launches");
  BlockingWait waiting;  // before the lock: the peers this waits for may need the GIL
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = pushed_;
  done_cv_.wait(lock, [&] { return finished_ >= target; });
}

bool GroupLauncher::empty() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ == pushed_;
}

bool GroupLauncher::any_pending() { return g_pending.load() > 0; }

bool GroupLauncher::pending_on(int device) { return any_pending() && !of(device).empty(); }

void GroupLauncher::drain_all() {
  std::vector<GroupLauncher*> all;
  {
    std::lock_guard<std::mutex> lock(g_launchers_mu);
    for (auto& [device, launcher] : launchers()) all.push_back(launcher);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (GroupLauncher* launcher : all) {
    if (launcher->on_launcher_thread()) continue;
    BlockingWait waiting;
    std::unique_lock<std::mutex> lock(launcher->mu_);
    const uint64_t target = launcher->pushed_;
    launcher->done_cv_.wait_until(lock, until, [&] { return launcher->finished_ >= target; });
  }
}

void GroupLauncher::await_resolved(const pjrt::Buffer& buffer) {
  if (!buffer.unresolved() || g_pending.load() == 0) return;
  BlockingWait waiting;
  std::unique_lock<std::mutex> lock(g_resolved_mu);
  // No task left to resolve it: not a group launch's (the caller reports that).
  g_resolved_cv.wait(lock, [&] { return !buffer.unresolved() || g_pending.load() == 0; });
}

bool queue_behind_group(Launch& launch) {
  if (!GroupLauncher::any_pending()) return false;
  bool promised = false;
  for (size_t i = 0; i < launch.num_args && !promised; ++i) promised = launch.buffers[i]->unresolved();
  GroupLauncher& group = GroupLauncher::of(launch.device);
  if (!promised || group.empty()) return false;
  // Any argument the launch queue still promises is launched before it there: the queue's own
  // launches never wait for the group launcher, so the group launcher may wait for them.
  if (!launch.queued) {
    launch.queued = true;  // its outputs count as held while defined until it is launched
    for (size_t i = launch.num_args; i < launch.buffers.size(); ++i) launch.buffers[i]->hold_while_defined();
  }
  group.push([launch]() mutable {
    // A failure fails the outputs: their readers (and the programs that read them) get the error.
    launch_now(launch);
  });
  return true;
}

void launch_program_now_or_behind_group(Launch& launch) {
  if (!queue_behind_group(launch)) launch_now(launch);  // throws, naming the launch's label, when PJRT refuses it
}

}  // namespace tpu::runtime
