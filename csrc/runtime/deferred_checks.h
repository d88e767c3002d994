// Assertions the device evaluates (torch._assert_async) and the host learns about only at the
// next synchronization: each check holds a way to read the device's verdict and the message to
// raise when it is false. WorkTracker::synchronize and blocking host reads evaluate them, as CUDA
// reports a device-side assert at the next synchronizing call.
//
// The cost where nothing is pending is one atomic load: no lock on the sync or read paths.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace tpu::runtime {

class DeferredChecks {
 public:
  struct Check {
    // Reads the verdict; may wait for the device (and flush deferred work). A throw (the verdict's
    // buffer failed) counts as a failure with that message.
    std::function<bool()> passed;
    std::string message;  // the error when the verdict is false
  };

  // Queues a check. Beyond kMaxPending the older half is evaluated now (bounding how many
  // verdicts stay alive, as WorkTracker bounds outstanding work); a failure found then is kept
  // for the next synchronization.
  void add(Check check);
  // Evaluates every queued check and returns the message of the first failure (one kept from an
  // earlier evaluation first), or nullopt. Every check is consumed, passed or not.
  std::optional<std::string> take_failure() {
    if (active_.load(std::memory_order_acquire) == 0) return std::nullopt;
    return take_failure_slow();
  }
  // take_failure, raised as std::runtime_error.
  void raise_failure();

  struct Stats {
    uint64_t pending = 0;    // queued, not evaluated yet
    uint64_t evaluated = 0;  // verdicts read so far
    uint64_t failed = 0;     // of which false
  };
  Stats stats();

  static constexpr size_t kMaxPending = 1024;

 private:
  std::optional<std::string> take_failure_slow();
  // Evaluates `checks`; records the first failure in failure_ (if none is kept yet).
  void evaluate(std::deque<Check>& checks);
  void update_active_locked();

  std::atomic<size_t> active_{0};  // queued checks + (a kept failure ? 1 : 0)
  std::mutex mu_;
  std::deque<Check> checks_;
  std::optional<std::string> failure_;
  uint64_t evaluated_ = 0;
  uint64_t failed_ = 0;
};

}  // namespace tpu::runtime
