#include "device/event.h"

#include <c10/util/Exception.h>

#include <thread>

#include "runtime/runtime.h"

namespace tpu::device {

void TpuEvent::record() {
  auto state = std::make_shared<State>();
  state->events = runtime::Runtime::get().tracker(device_).pending();
  state->remaining = static_cast<int>(state->events.size());
  if (state->remaining == 0) {
    state->done_at = std::chrono::steady_clock::now();
  } else {
    for (const auto& ev : state->events) {
      ev->on_ready([state](const pjrt::ErrorInfo*) {
        std::lock_guard<std::mutex> lock(state->mu);
        if (--state->remaining == 0) state->done_at = std::chrono::steady_clock::now();
      });
    }
  }
  state_ = std::move(state);
}

bool TpuEvent::query() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->remaining == 0;
}

void TpuEvent::synchronize() const {
  if (!state_) return;
  for (const auto& ev : state_->events) {
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
