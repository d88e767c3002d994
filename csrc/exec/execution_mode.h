// The eager execution mode of the process. Only *when* work runs depends on it, never what it
// computes:
//   kStrict (default) - each op is enqueued at once; the host waits only when it reads data.
//   kDebug            - each op is also waited for, so a device error is raised by its op
//                       (TPU_LAUNCH_BLOCKING=1).
//   kFused            - ops are recorded into a deferred graph that is compiled and run as one
//                       program at a materialisation point (TORCH_TPU_DEFER_AND_FUSE=1).
#pragma once

#include <cstdint>

namespace tpu::exec {

enum class EagerMode { kDebug = 0, kStrict = 1, kFused = 2 };

// The mode the process started in: from the environment variables above (Debug wins).
EagerMode initial_mode();
// The mode of the calling thread's ops: the process mode, except while the thread records a
// capture (Fused) or is under a StrictScope.
EagerMode eager_mode();
// The calling thread records its ops (Fused) whatever the process mode, or no longer: a
// torch.compile capture (exec/fused_graphs.h) - per thread, so ranks that run as threads capture
// side by side without switching each other's mode.
void set_thread_fused(bool on);
// Changing the mode flushes recorded work first.
void set_eager_mode(EagerMode mode);
// How many times the process mode has changed (timings across a change compare nothing).
uint64_t mode_changes();

// While alive, the calling thread's ops run in Strict mode when the process is in Fused mode:
// the work around a collective (and the copies a communication thread makes) is never recorded
// into the deferred graph, whose ops must be the same on every rank.
class StrictScope {
 public:
  StrictScope();
  ~StrictScope();
  StrictScope(const StrictScope&) = delete;
  StrictScope& operator=(const StrictScope&) = delete;

 private:
  bool previous_;
};

}  // namespace tpu::exec
