#include "device/event.h"

#include <c10/util/Exception.h>

#include <thread>

#include "runtime/group_launcher.h"
#include "runtime/pending_work.h"
#include "runtime/runtime.h"

namespace tpu::device {

void TpuEvent::watch(const std::shared_ptr<State>& state, std::vector<std::shared_ptr<pjrt::Event>> events) {
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->events = events;
    state->remaining = static_cast<int>(events.size());
    if (state->remaining == 0) state->done_at = std::chrono::steady_clock::now();
  }
  for (const auto& ev : events) {
    ev->on_ready([state](const pjrt::ErrorInfo*) {
      std::lock_guard<std::mutex> lock(state->mu);
      if (--state->remaining == 0) state->done_at = std::chrono::steady_clock::now();
    });
  }
}

void TpuEvent::record(bool timing) {
  auto state = std::make_shared<State>();
  if (!timing && (runtime::has_pending_work_on(device_) || runtime::GroupLauncher::pending_on(device_))) {
    // Deferred: resolve() captures the work outstanding then, which holds all outstanding now
    // (a launch still queued on the group launcher gives its completion to the tracker later).
    state->deferred.store(true);
  } else {
    watch(state, runtime::Runtime::get().tracker(device_).pending());
  }
  state_ = std::move(state);
}

bool TpuEvent::deferred() const { return state_ && state_->deferred.load(); }

void TpuEvent::resolve() const {
  if (!deferred()) return;
  std::call_once(state_->resolved, [this] {
    // Everything outstanding now: the work enqueued at the record, the graph that was deferred
    // then, and what came after it (a later completion, never an earlier one).
    watch(state_, runtime::Runtime::get().tracker(device_).pending());
    state_->deferred.store(false);
  });
}

bool TpuEvent::query() const {
  if (!state_) return true;
  resolve();
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->remaining == 0;
}

void TpuEvent::synchronize() const {
  if (!state_) return;
  resolve();
  std::vector<std::shared_ptr<pjrt::Event>> events;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    events = state_->events;
  }
  for (const auto& ev : events) {
    try {
      ev->await();
    } catch (const std::exception&) {
      // Reported by torch.tpu.synchronize(), which names the failing op.
    }
  }
  // The completion callbacks may still be running; wait for the last one.
  while (!query()) std::this_thread::yield();
}

double TpuEvent::elapsed_ms(const TpuEvent& end) const {
  TORCH_CHECK(state_ && end.state_,
              "elapsed_time needs both events to have been recorded");
  synchronize();
  end.synchronize();
  std::lock_guard<std::mutex> l1(state_->mu);
  std::lock_guard<std::mutex> l2(end.state_->mu);
  return std::chrono::duration<double, std::milli>(end.state_->done_at - state_->done_at).count();
}

}  // namespace tpu::device
