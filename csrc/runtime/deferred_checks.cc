#include "runtime/deferred_checks.h"

#include <exception>
#include <stdexcept>
#include <utility>

namespace tpu::runtime {

void DeferredChecks::update_active_locked() {
  active_.store(checks_.size() + (failure_ ? 1 : 0), std::memory_order_release);
}

void DeferredChecks::add(Check check) {
  std::deque<Check> oldest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    checks_.push_back(std::move(check));
    if (checks_.size() > kMaxPending) {
      const size_t n = checks_.size() / 2;
      for (size_t i = 0; i < n; ++i) {
        oldest.push_back(std::move(checks_.front()));
        checks_.pop_front();
      }
    }
    update_active_locked();
  }
  if (!oldest.empty()) evaluate(oldest);
}

void DeferredChecks::evaluate(std::deque<Check>& checks) {
  // Outside the lock: reading a verdict waits for the device and may flush deferred work.
  std::optional<std::string> first;
  uint64_t failed = 0;
  for (Check& c : checks) {
    bool ok = false;
    std::string message;
    try {
      ok = c.passed();
      if (!ok) message = std::move(c.message);
    } catch (const std::exception& e) {
      message = e.what();
    }
    if (!ok) {
      ++failed;
      if (!first) first = std::move(message);
    }
  }
  const uint64_t evaluated = checks.size();
  checks.clear();  // releases the verdicts' buffers outside the lock too
  std::lock_guard<std::mutex> lock(mu_);
  evaluated_ += evaluated;
  failed_ += failed;
  if (first && !failure_) failure_ = std::move(first);
  update_active_locked();
}

std::optional<std::string> DeferredChecks::take_failure_slow() {
  std::deque<Check> checks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    checks.swap(checks_);
    update_active_locked();
  }
  if (!checks.empty()) evaluate(checks);
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<std::string> failure = std::move(failure_);
  failure_.reset();
  update_active_locked();
  return failure;
}

void DeferredChecks::raise_failure() {
  if (auto failure = take_failure()) throw std::runtime_error(*failure);
}

DeferredChecks::Stats DeferredChecks::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return Stats{checks_.size(), evaluated_, failed_};
}

}  // namespace tpu::runtime
