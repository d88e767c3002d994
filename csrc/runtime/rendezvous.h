// A meeting point for the ranks of one group that live in this process (one thread each).
//
// Each rank arrives at a numbered round with a payload; every arrival returns the payloads of all
// ranks, in rank order, once all have arrived. A round that is not complete within the timeout
// fails for the ranks that came, naming the ranks that did not; a rank that abandons the group
// (an error, shutdown) makes every waiting and later round fail at once, naming it - so a failing
// rank never leaves the others waiting.
//
// The device transport of tpu_dist meets here twice per collective: before launching (the
// payloads are the collectives' signatures, compared by the caller) and after (so no rank runs
// ahead by more than one collective, which XLA:CPU's own rendezvous cannot take).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tpu::runtime {

class Rendezvous {
 public:
  explicit Rendezvous(int size);

  // The process-wide rendezvous of the group named `token` (created by its first user; all
  // users must agree on `size`).
  static std::shared_ptr<Rendezvous> shared(const std::string& token, int size);

  int size() const { return size_; }

  // Blocks until all ranks arrived at `round`, then returns their payloads. Throws
  // std::runtime_error starting with `what` on a timeout or an abandoned group.
  std::vector<std::string> meet(uint64_t round, int rank, std::string payload,
                                std::chrono::milliseconds timeout, const std::string& what);
  // `rank` will not arrive any more; `why` says what happened to it.
  void abandon(int rank, const std::string& why);

 private:
  struct Round {
    std::vector<std::optional<std::string>> payloads;
    int arrived = 0;
    int collected = 0;
  };
  std::string missing_locked(const Round& round) const;

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Round> rounds_;
  std::map<int, std::string> abandoned_;
};

}  // namespace tpu::runtime
