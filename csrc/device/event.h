// torch.Event / torch.tpu.Event on a tpu device. Recording captures the device's outstanding
// work; the event completes when all of it has, and remembers the host time it observed that.
//
// In Fused Eager an event without timing does not cut the device's deferred graph: recorded
// while ops wait in it, the event stays deferred until it is first queried or waited on, and
// then launches the graph and covers everything outstanding at that moment (a later
// completion, never an earlier one). FSDP2 records an event around every collective and waits
// on it from another stream (a no-op here: one queue per device), so cutting the graph at each
// would split a step into many programs. Timing events always cut: their host times must mark
// the point where they were recorded.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "pjrt/event.h"

namespace tpu::device {

class TpuEvent {
 public:
  explicit TpuEvent(int device) : device_(device) {}
  int device() const { return device_; }
  // Captures the device's outstanding work (`timing`: the event measures time).
  void record(bool timing = true);
  bool recorded() const { return state_ != nullptr; }
  bool query() const;
  void synchronize() const;
  // Milliseconds between two completed events (synchronizes both first).
  double elapsed_ms(const TpuEvent& end) const;

 private:
  struct State {
    std::mutex mu;
    int remaining = 0;
    std::chrono::steady_clock::time_point done_at;
    std::vector<std::shared_ptr<pjrt::Event>> events;
    std::atomic<bool> deferred{false};
    std::once_flag resolved;
  };
  // Counts `events` down to done_at as they complete.
  static void watch(const std::shared_ptr<State>& state, std::vector<std::shared_ptr<pjrt::Event>> events);
  // Whether the event is recorded but still deferred (see above).
  bool deferred() const;
  // A deferred event: launches the device's deferred graph and captures the outstanding work.
  void resolve() const;

  int device_;
  std::shared_ptr<State> state_;
};

}  // namespace tpu::device
