#include "exec/execution_mode.h"

#include <atomic>

#include "common/env_flag.h"
#include "runtime/pending_work.h"

namespace tpu::exec {

namespace {

std::atomic<EagerMode>& mode_slot() {
  static std::atomic<EagerMode> mode{initial_mode()};
  return mode;
}

std::atomic<uint64_t> g_mode_changes{0};

thread_local bool t_strict = false;
thread_local bool t_fused = false;

}  // namespace

EagerMode initial_mode() {
  if (env_flag("TPU_LAUNCH_BLOCKING")) return EagerMode::kDebug;
  if (env_flag("TORCH_TPU_DEFER_AND_FUSE")) return EagerMode::kFused;
  return EagerMode::kStrict;
}

EagerMode eager_mode() {
  const EagerMode mode = t_fused ? EagerMode::kFused : mode_slot().load(std::memory_order_relaxed);
  return (t_strict && mode == EagerMode::kFused) ? EagerMode::kStrict : mode;
}

void set_thread_fused(bool on) { t_fused = on; }

StrictScope::StrictScope() : previous_(t_strict) { t_strict = true; }
StrictScope::~StrictScope() { t_strict = previous_; }

uint64_t mode_changes() { return g_mode_changes.load(std::memory_order_relaxed); }

void set_eager_mode(EagerMode mode) {
  if (mode == mode_slot().load()) return;
  runtime::flush_pending_work();
  mode_slot().store(mode);
  g_mode_changes.fetch_add(1, std::memory_order_relaxed);
  // Work recorded by another thread between the flush and the switch is flushed now.
  if (mode != EagerMode::kFused) runtime::flush_pending_work();
}

}  // namespace tpu::exec
