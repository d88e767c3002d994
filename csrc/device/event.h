// torch.Event / torch.tpu.Event on a tpu device. Recording captures the device's outstanding
// work; the event completes when all of it has, and remembers the host time it observed that.
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
  // Captures the device's outstanding work.
  void record();
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
  };
  int device_;
  std::shared_ptr<State> state_;
};

}  // namespace tpu::device
