#include "distributed/store_rendezvous.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <cstdio>
#include <thread>

namespace tpu::distributed {

namespace {
const char kAbandoned[] = "abandoned";
}  // namespace

StoreRendezvous::StoreRendezvous(c10::intrusive_ptr<c10d::Store> store, const std::string& token, int size)
    : store_(c10::make_intrusive<c10d::PrefixStore>("tpu_dist/rendezvous/" + token + "/", std::move(store))),
      size_(size) {}

std::string StoreRendezvous::key(uint64_t round, int rank) {
  return std::to_string(round) + "/" + std::to_string(rank);
}

std::string StoreRendezvous::abandoned() const {
  if (!store_->check({kAbandoned})) return "";
  const std::vector<uint8_t> v = store_->get(kAbandoned);
  return std::string(v.begin(), v.end());
}

std::vector<std::string> StoreRendezvous::meet(uint64_t round, int rank, std::string payload,
                                               std::chrono::milliseconds timeout, const std::string& what) {
  const std::string gone = abandoned();
  if (!gone.empty()) throw std::runtime_error(what + " cannot complete: " + gone);
  store_->set(key(round, rank), std::vector<uint8_t>(payload.begin(), payload.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(key(round, r));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(20);
  while (!store_->check(keys)) {
    const std::string why = abandoned();
    if (!why.empty()) throw std::runtime_error(what + " cannot complete: " + why);
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (int r = 0; r < size_; ++r) {
        if (!store_->check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%.1f", timeout.count() / 1000.0);
      const std::string message = what + " timed out after " + seconds + " s on rank " +
                                  std::to_string(rank) + ": rank(s) " + missing + " did not reach it";
      abandon(rank, "gave up: " + message);  // the ranks still to come must not go on alone
      throw std::runtime_error(message);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  std::vector<std::string> all;
  for (const auto& v : store_->multiGet(keys)) all.emplace_back(v.begin(), v.end());
  // Every rank has read the previous round (it arrived at this one): its key can go.
  if (round > 0) store_->deleteKey(key(round - 1, rank));
  return all;
}

void StoreRendezvous::abandon(int rank, const std::string& why) {
  const std::string text = "rank " + std::to_string(rank) + " " + why;
  try {
    // The first reason stays (a rank that raised, then left the group, is reported as raising).
    store_->compareSet(kAbandoned, {}, std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception&) {
    // The store is gone with the process that hosted it: the others fail on it anyway.
  }
}

}  // namespace tpu::distributed
