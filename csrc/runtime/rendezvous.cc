#include "runtime/rendezvous.h"

#include "runtime/blocking_wait.h"

#include <cstdio>
#include <stdexcept>
#include <unordered_map>

namespace tpu::runtime {

InProcessRendezvous::InProcessRendezvous(int size) : size_(size) {
  if (size < 1) throw std::invalid_argument("a rendezvous needs at least one rank");
  waiting_.resize(static_cast<size_t>(size));
}

std::shared_ptr<InProcessRendezvous> InProcessRendezvous::shared(const std::string& token, int size) {
  static std::mutex mu;
  static auto* groups = new std::unordered_map<std::string, std::weak_ptr<InProcessRendezvous>>();
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = groups->begin(); it != groups->end();) {
    it = it->second.expired() ? groups->erase(it) : std::next(it);
  }
  std::weak_ptr<InProcessRendezvous>& slot = (*groups)[token];
  std::shared_ptr<InProcessRendezvous> r = slot.lock();
  if (r == nullptr) {
    r = std::make_shared<InProcessRendezvous>(size);
    slot = r;
  } else if (r->size() != size) {
    throw std::invalid_argument("group '" + token + "' was joined with " + std::to_string(size) +
                                " ranks but has " + std::to_string(r->size()));
  }
  return r;
}

std::string InProcessRendezvous::missing_locked(const Round& round) const {
  std::string s;
  for (int r = 0; r < size_; ++r) {
    if (!round.payloads[r]) s += (s.empty() ? "" : ", ") + std::to_string(r);
  }
  return s;
}

std::string InProcessRendezvous::diverged_locked() const {
  std::string where;
  for (int r = 0; r < size_; ++r) {
    const Waiting& w = waiting_[r];
    if (w.what == nullptr) return "";
    auto it = rounds_.find(w.round);
    if (it != rounds_.end() && it->second.arrived == size_) return "";  // complete: it will go on
    where += (where.empty() ? "" : ", ") + ("rank " + std::to_string(r) + " at round " + std::to_string(w.round) +
                                            " (" + *w.what + ")");
  }
  return "the ranks' sequences of collectives diverged - " + where +
         " - so none of these rounds can complete. Every rank must run the same collectives in the "
         "same order (inside torch.tpu.distributed.spmd_safe: the same device ops too)";
}

std::vector<std::string> InProcessRendezvous::meet(uint64_t number, int rank, std::string payload,
                                          std::chrono::milliseconds timeout, const std::string& what) {
  if (rank < 0 || rank >= size_) throw std::invalid_argument(what + ": rank out of range");
  // The peers are threads of this process: they may need the GIL this thread holds to get here.
  // Declared before the lock, so the lock is released before the GIL is taken back.
  BlockingWait waiting;
  std::unique_lock<std::mutex> lock(mu_);
  auto abandoned_error = [&] {
    std::string who;
    for (const auto& [r, why] : abandoned_) who += (who.empty() ? "rank " : "; rank ") + std::to_string(r) + " " + why;
    return std::runtime_error(what + " cannot complete: " + who);
  };
  if (!abandoned_.empty()) throw abandoned_error();
  Round& round = rounds_[number];
  if (round.payloads.empty()) round.payloads.resize(size_);
  if (round.payloads[rank]) {
    throw std::logic_error(what + ": rank " + std::to_string(rank) + " arrived twice at round " +
                           std::to_string(number));
  }
  round.payloads[rank] = std::move(payload);
  if (++round.arrived == size_) cv_.notify_all();
  // While this rank waits here (reset on every way out, with the lock held).
  waiting_[rank] = Waiting{number, &what};
  struct Leave {
    Waiting& w;
    ~Leave() { w.what = nullptr; }
  } leave{waiting_[rank]};
  if (round.arrived < size_) {
    const std::string diverged = diverged_locked();
    if (!diverged.empty()) {
      abandoned_.emplace(rank, "found " + diverged);
      cv_.notify_all();
      throw std::runtime_error(what + " cannot complete: " + diverged);
    }
  }
  cv_.wait_for(lock, timeout, [&] { return round.arrived == size_ || !abandoned_.empty(); });
  if (round.arrived < size_) {
    if (!abandoned_.empty()) throw abandoned_error();
    // A timed-out round breaks the group: the ranks still to come must not go on alone.
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.1f", timeout.count() / 1000.0);
    const std::string message = what + " timed out after " + seconds + " s on rank " +
                                std::to_string(rank) + ": rank(s) " + missing_locked(round) +
                                " did not reach it";
    abandoned_.emplace(rank, "gave up: " + message);
    cv_.notify_all();
    throw std::runtime_error(message);
  }
  std::vector<std::string> all;
  all.reserve(size_);
  for (const auto& p : round.payloads) all.push_back(*p);
  if (++round.collected == size_) rounds_.erase(number);
  return all;
}

void InProcessRendezvous::abandon(int rank, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  abandoned_.emplace(rank, why);
  cv_.notify_all();
}

}  // namespace tpu::runtime
