// Programs compiled off the calling thread. A serving engine that meets a step shape worth its
// own program keeps serving that shape in a compiled bucket that covers it while the program
// compiles here (torch_tpu/serving/step_state.py), instead of stopping every request for the
// compile. One worker thread, started by the first job, runs the jobs in order; a job compiles
// into the one program cache (exec/program_cache.h), so the capture that later records the same
// computation finds its program there. Callers poll a job's state by the program's fingerprint.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "cache/fingerprint.h"

namespace tpu::exec {

enum class BackgroundState { kUnknown, kPending, kReady, kFailed };

class BackgroundCompiles {
 public:
  // The process's worker (never destroyed: a compile may still run when the process exits).
  static BackgroundCompiles& get();

  // Queues `job` (which compiles the program `fp` names into the program cache) unless `fp` is
  // already queued or done.
  void submit(const cache::Fingerprint& fp, std::function<void()> job);
  // `fp`'s program is already in the program cache: its state is kReady.
  void known(const cache::Fingerprint& fp);
  // The state of `fp`'s job; `error` gets a failed job's message.
  BackgroundState state(const cache::Fingerprint& fp, std::string* error = nullptr) const;
  // Blocks until `fp`'s job (if any) has finished.
  void wait(const cache::Fingerprint& fp);
  // Blocks until every queued job has finished.
  void wait_idle();

 private:
  BackgroundCompiles() = default;
  void work();

  struct Entry {
    BackgroundState state = BackgroundState::kUnknown;
    std::string error;
  };
  mutable std::mutex mu_;
  std::condition_variable queued_;
  std::condition_variable idle_;
  std::condition_variable finished_;  // a job has finished
  std::deque<std::pair<cache::Fingerprint, std::function<void()>>> queue_;
  std::unordered_map<cache::Fingerprint, Entry, cache::FingerprintHash> entries_;
  bool started_ = false;
  bool busy_ = false;
};

}  // namespace tpu::exec
