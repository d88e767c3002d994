// The eager execution mode of the process. Only *when* work runs depends on it, never what it
// computes:
//   kStrict (default) - each op is enqueued at once; the host waits only when it reads data.
//   kDebug            - each op is also waited for, so a device error is raised by its op
//                       (TPU_LAUNCH_BLOCKING=1).
//   kFused            - ops are recorded into a deferred graph that is compiled and run as one
//                       program at a materialisation point (TORCH_TPU_DEFER_AND_FUSE=1).
#pragma once

namespace tpu::exec {

enum class EagerMode { kDebug = 0, kStrict = 1, kFused = 2 };

// The mode the process started in: from the environment variables above (Debug wins).
EagerMode initial_mode();
EagerMode eager_mode();
// Changing the mode flushes recorded work first.
void set_eager_mode(EagerMode mode);

}  // namespace tpu::exec
