// A meeting point for the ranks of one group.
//
// Each rank arrives at a numbered round with a payload; every arrival returns the payloads of all
// ranks, in rank order, once all have arrived. A round that is not complete within the timeout
// fails for the ranks that came, naming the ranks that did not, and breaks the group; a rank that
// abandons the group (an error, shutdown) makes every waiting and later round fail at once, naming
// it - so a failing rank never leaves the others waiting. Ranks in this process that all wait at
// rounds none of which can complete (each waits at a different one: their sequences of
// collectives diverged) fail at once too, each named with the round and operation it waits in.
//
// The device transport of tpu_dist meets twice per collective: before launching (the payloads
// are the collectives' signatures, compared by the caller) and after (so no rank runs ahead by
// more than one collective, which XLA:CPU's own rendezvous cannot take). Ranks that are threads
// of this process meet in memory (InProcessRendezvous); ranks in different processes through the
// process group's store (distributed/store_rendezvous.h).
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
  virtual ~Rendezvous() = default;
  virtual int size() const = 0;
  // Blocks until all ranks arrived at `round`, then returns their payloads. Throws
  // std::runtime_error starting with `what` on a timeout or an abandoned group.
  virtual std::vector<std::string> meet(uint64_t round, int rank, std::string payload,
                                        std::chrono::milliseconds timeout, const std::string& what) = 0;
  // `rank` will not arrive any more; `why` says what happened to it.
  virtual void abandon(int rank, const std::string& why) = 0;
};

// Ranks that are threads of this process.
class InProcessRendezvous : public Rendezvous {
 public:
  explicit InProcessRendezvous(int size);

  // The process-wide rendezvous of the group named `token` (created by its first user; all
  // users must agree on `size`).
  static std::shared_ptr<InProcessRendezvous> shared(const std::string& token, int size);

  int size() const override { return size_; }
  std::vector<std::string> meet(uint64_t round, int rank, std::string payload,
                                std::chrono::milliseconds timeout, const std::string& what) override;
  void abandon(int rank, const std::string& why) override;

 private:
  struct Round {
    std::vector<std::optional<std::string>> payloads;
    int arrived = 0;
    int collected = 0;
  };
  std::string missing_locked(const Round& round) const;
  // Non-empty when every rank waits at a round that is not complete: no round can complete any
  // more. Says where each rank waits.
  std::string diverged_locked() const;

  struct Waiting {
    uint64_t round = 0;
    const std::string* what = nullptr;  // the waiting call's own; null: not waiting
  };

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Round> rounds_;
  std::map<int, std::string> abandoned_;
  std::vector<Waiting> waiting_;  // by rank
};

}  // namespace tpu::runtime
