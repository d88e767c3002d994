#include "runtime/work_tracker.h"

#include <algorithm>
#include <stdexcept>

#include "profiler/trace_hooks.h"
#include "runtime/group_launcher.h"
#include "runtime/launch_queue.h"
#include "runtime/pending_work.h"

namespace tpu::runtime {

namespace {
constexpr char kDeviceErrorPrefix[] = "torch_tpu: device error in ";
}  // namespace

std::string device_error_message(const char* label, const std::string& message) {
  return std::string(kDeviceErrorPrefix) + (label && *label ? label : "an op") + ": " + message;
}

bool is_device_error_message(const std::string& message) {
  return message.rfind(kDeviceErrorPrefix, 0) == 0;
}

void WorkTracker::note_error_locked(const Item& item, const pjrt::ErrorInfo& error) {
  std::string message = device_error_message(item.label, error.message);
  auto it = std::find(reported_.begin(), reported_.end(), message);
  if (it != reported_.end()) {
    reported_.erase(it);
    return;
  }
  if (!first_error_) first_error_ = std::move(message);
}

void WorkTracker::reported(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (first_error_ == message) {
    first_error_.reset();
  } else if (reported_.size() < 64) {
    reported_.push_back(message);
  }
}

void WorkTracker::prune_locked() {
  while (!items_.empty() && items_.front().done->is_ready()) {
    if (auto err = items_.front().done->error()) note_error_locked(items_.front(), *err);
    items_.pop_front();
  }
}

void WorkTracker::add(std::shared_ptr<pjrt::Event> done, const char* label,
                      std::vector<std::shared_ptr<pjrt::Buffer>> keep, size_t first_output) {
  if (!done) return;
  std::shared_ptr<pjrt::Event> oldest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    prune_locked();
    items_.emplace_back(std::move(done), label, std::move(keep), first_output);
    if (items_.size() > kMaxPending) oldest = items_.front().done;
  }
  if (oldest) {
    try {
      oldest->await();
    } catch (const std::exception&) {
      // kept on the event; reported by the next synchronize
    }
  }
}

void WorkTracker::note_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!first_error_) first_error_ = message;
}

void WorkTracker::synchronize() {
  profiler::HostSpan span("wait");
  flush_pending_work_on(device_);
  if (GroupLauncher::any_pending()) GroupLauncher::of(device_).drain();  // may wait for the queue's: first
  LaunchQueue::get().drain();
  std::deque<Item> items;
  {
    std::lock_guard<std::mutex> lock(mu_);
    items.swap(items_);
  }
  std::optional<std::string> error;
  for (const Item& item : items) {
    try {
      item.done->await();
    } catch (const std::exception& e) {
      if (!error) {
        auto info = item.done->error();
        error = device_error_message(item.label, info ? info->message : e.what());
      }
    }
  }
  // Every verdict is computed by now; a device error is reported before a failed assertion.
  std::optional<std::string> failed_check = checks_.take_failure();
  std::lock_guard<std::mutex> lock(mu_);
  if (first_error_) {
    error = std::move(first_error_);
    first_error_.reset();
  }
  if (error) throw std::runtime_error(*error);
  if (failed_check) throw std::runtime_error(*failed_check);
}

bool WorkTracker::idle() {
  flush_pending_work_on(device_);
  if (GroupLauncher::pending_on(device_) || !LaunchQueue::get().empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  prune_locked();
  return items_.empty();
}

std::vector<std::shared_ptr<pjrt::Event>> WorkTracker::pending() {
  flush_pending_work_on(device_);
  if (GroupLauncher::any_pending()) GroupLauncher::of(device_).drain();  // may wait for the queue's: first
  LaunchQueue::get().drain();
  std::lock_guard<std::mutex> lock(mu_);
  prune_locked();
  std::vector<std::shared_ptr<pjrt::Event>> out;
  for (const Item& item : items_) out.push_back(item.done);
  return out;
}

}  // namespace tpu::runtime
