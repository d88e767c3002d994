// The rendezvous of ranks that are threads of one process (runtime/rendezvous.h, InProcessRendezvous): payloads come
// back in rank order once all arrived; a missing rank is named after the timeout and breaks the
// group for the ranks still to come; an abandoning rank fails the others at once; ranks waiting at
// different rounds (their sequences diverged) fail at once, saying where each waits.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/rendezvous.h"

namespace tpu {
namespace {

using std::chrono::milliseconds;

TEST(Rendezvous, EveryRankGetsEveryPayloadInRankOrder) {
  runtime::InProcessRendezvous r(3);
  std::vector<std::vector<std::string>> got(3);
  std::vector<std::thread> threads;
  for (int rank = 2; rank >= 0; --rank) {
    threads.emplace_back([&, rank] {
      for (uint64_t round = 0; round < 5; ++round) {
        got[rank] = r.meet(round, rank, "r" + std::to_string(rank) + "/" + std::to_string(round),
                           milliseconds(5000), "test");
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, (std::vector<std::string>{"r0/4", "r1/4", "r2/4"}));
}

TEST(Rendezvous, AMissingRankIsNamedAndBreaksTheGroup) {
  runtime::InProcessRendezvous r(3);
  std::string error;
  std::thread t([&] {
    try {
      r.meet(0, 0, "", milliseconds(100), "all_reduce");
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
  });
  std::thread u([&] {
    try {
      r.meet(0, 2, "", milliseconds(5000), "all_reduce");
    } catch (const std::runtime_error&) {
    }
  });
  t.join();
  u.join();
  EXPECT_NE(error.find("all_reduce timed out after 0.1 s on rank 0"), std::string::npos) << error;
  EXPECT_NE(error.find("rank(s) 1 did not reach it"), std::string::npos) << error;
  // Rank 1 arriving late must not go on alone.
  EXPECT_THROW(r.meet(0, 1, "", milliseconds(100), "all_reduce"), std::runtime_error);
}

TEST(Rendezvous, AnAbandoningRankFailsTheOthersAtOnce) {
  runtime::InProcessRendezvous r(2);
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  std::thread t([&] {
    try {
      r.meet(0, 0, "", milliseconds(30000), "broadcast");
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(milliseconds(50));
  r.abandon(1, "raised ValueError: boom");
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(error.find("broadcast cannot complete: rank 1 raised ValueError: boom"), std::string::npos) << error;
}

TEST(Rendezvous, RanksWaitingAtDifferentRoundsFailAtOnceSayingWhere) {
  // Rank 0 counted one collective more than rank 1 (it recorded one without meeting): each waits
  // at a round the other never reaches.
  runtime::InProcessRendezvous r(2);
  std::string errors[2];
  const auto start = std::chrono::steady_clock::now();
  std::thread t([&] {
    try {
      r.meet(2, 0, "", milliseconds(30000), "a program with collectives");
    } catch (const std::runtime_error& e) {
      errors[0] = e.what();
    }
  });
  std::this_thread::sleep_for(milliseconds(50));
  try {
    r.meet(0, 1, "", milliseconds(30000), "all_reduce");
  } catch (const std::runtime_error& e) {
    errors[1] = e.what();
  }
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  for (const std::string& error : errors) {
    EXPECT_NE(error.find("sequences of collectives diverged - rank 0 at round 2 (a program with collectives), "
                         "rank 1 at round 0 (all_reduce)"), std::string::npos) << error;
  }
}

TEST(Rendezvous, ARankNotYetAwakeFromACompleteRoundIsNotADivergence) {
  // Ranks racing through many rounds: one may arrive at the next round while another has not yet
  // woken from the previous, complete one - that must never be taken for a divergence.
  runtime::InProcessRendezvous r(3);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        for (uint64_t round = 0; round < 2000; ++round) r.meet(round, rank, "", milliseconds(10000), "test");
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Rendezvous, SharedRendezvousAreFoundByNameAndSize) {
  auto a = runtime::InProcessRendezvous::shared("group-a", 2);
  EXPECT_EQ(runtime::InProcessRendezvous::shared("group-a", 2), a);
  EXPECT_NE(runtime::InProcessRendezvous::shared("group-b", 2), a);
  EXPECT_THROW(runtime::InProcessRendezvous::shared("group-a", 3), std::invalid_argument);
}

}  // namespace
}  // namespace tpu
