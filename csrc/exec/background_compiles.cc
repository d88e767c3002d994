#include "exec/background_compiles.h"

#include <exception>
#include <thread>

#include "common/thread_name.h"

namespace tpu::exec {

BackgroundCompiles& BackgroundCompiles::get() {
  static BackgroundCompiles* compiles = new BackgroundCompiles();
  return *compiles;
}

void BackgroundCompiles::submit(const cache::Fingerprint& fp, std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& entry = entries_[fp];
  if (entry.state == BackgroundState::kPending || entry.state == BackgroundState::kReady) return;
  entry = Entry{BackgroundState::kPending, {}};
  queue_.emplace_back(fp, std::move(job));
  if (!started_) {
    started_ = true;
    std::thread([this] {
      name_this_thread("tpu_compile");
      work();
    }).detach();
  }
  queued_.notify_one();
}

void BackgroundCompiles::known(const cache::Fingerprint& fp) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& entry = entries_[fp];
  if (entry.state != BackgroundState::kPending) entry = Entry{BackgroundState::kReady, {}};
}

BackgroundState BackgroundCompiles::state(const cache::Fingerprint& fp, std::string* error) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(fp);
  if (it == entries_.end()) return BackgroundState::kUnknown;
  if (error != nullptr) *error = it->second.error;
  return it->second.state;
}

void BackgroundCompiles::wait(const cache::Fingerprint& fp) {
  std::unique_lock<std::mutex> lock(mu_);
  finished_.wait(lock, [&] {
    auto it = entries_.find(fp);
    return it == entries_.end() || it->second.state != BackgroundState::kPending;
  });
}

void BackgroundCompiles::wait_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

void BackgroundCompiles::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    queued_.wait(lock, [this] { return !queue_.empty(); });
    auto [fp, job] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    Entry done{BackgroundState::kReady, {}};
    try {
      job();
    } catch (const std::exception& e) {
      done = Entry{BackgroundState::kFailed, e.what()};
    } catch (...) {
      done = Entry{BackgroundState::kFailed, "unknown error"};
    }
    lock.lock();
    entries_[fp] = std::move(done);
    busy_ = false;
    finished_.notify_all();
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace tpu::exec
