// The group launcher: one thread per device for the launches that meet other ranks - a Fused
// graph recorded inside spmd_safe, a compiled graph's replay with collectives. Launching one
// means waiting for the device's previous collective program, meeting every rank (to compare
// what they are about to run), launching, and meeting again; done on the rank's own thread, that
// thread stood still while its peers caught up, and its next ops were recorded only after the
// slowest rank had launched. Handed to this thread, the rank returns as soon as the program's
// outputs are promised (pjrt/buffer.h) and records on while the ranks meet.
//
// Tasks run in the order they were pushed. Whatever must follow them - an eager collective (its
// own meets are numbered after the queued ones), a synchronize, the end of the process - drains
// the device's launcher first. A read of a promised output waits for that buffer alone (another
// rank's pending launches may wait for this rank to get further). Every wait here releases the
// GIL (runtime/blocking_wait.h): the peers that must arrive may be threads of this process.
//
// TORCH_TPU_GROUP_LAUNCH_THREAD=0 runs each task on the pushing thread instead (read once).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "pjrt/buffer.h"
#include "runtime/launch_queue.h"

namespace tpu::runtime {

class GroupLauncher {
 public:
  // The launcher of tpu:`device` (created on first use, never destroyed).
  static GroupLauncher& of(int device);

  // Runs `task` on the device's launcher thread after every task pushed before it. The task
  // handles its own failures (it fails the outputs it promised); what it throws is dropped.
  void push(std::function<void()> task);
  // Returns once every task pushed so far has run.
  void drain();
  bool empty();
  bool on_launcher_thread() const { return std::this_thread::get_id() == thread_id_; }

  // Tasks pushed and not yet run, on any device / on tpu:`device`.
  static bool any_pending();
  static bool pending_on(int device);
  // Drains every device's launcher, for at most a few seconds (the end of the process: a launch
  // whose peers are gone waits out its group's timeout in a meet, which exit does not).
  static void drain_all();
  // Waits until `buffer`, promised by a task of any device's launcher, is fulfilled or failed.
  static void await_resolved(const pjrt::Buffer& buffer);

 private:
  GroupLauncher() = default;
  void loop();

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t pushed_ = 0;
  uint64_t finished_ = 0;
  bool started_ = false;
  std::thread::id thread_id_;
};

// A launch with no collectives whose argument is still promised by a launch queued on its device's
// group launcher is queued behind it there (returns true), so that nothing waits for it: neither
// the thread running a fused flush or a replay (it may hold a graph's lock that a peer rank needs
// before its part of that launch can run) nor the launch queue's thread (every rank's eager ops
// pass through it). Returns false, leaving `launch` alone, otherwise.
bool queue_behind_group(Launch& launch);
// A whole program (a fused flush, a compiled graph's replay) with no collectives: queued behind
// the group launch it reads, or launched now on the calling thread.
void launch_program_now_or_behind_group(Launch& launch);

}  // namespace tpu::runtime
