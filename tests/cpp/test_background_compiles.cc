// exec/background_compiles.h: jobs run off the calling thread, in order, once per fingerprint;
// a failing job reports its message and the worker goes on.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "exec/background_compiles.h"

namespace tpu::exec {
namespace {

TEST(BackgroundCompiles, RunsJobsOffTheCallingThreadOncePerFingerprint) {
  auto& compiles = BackgroundCompiles::get();
  const auto fp = cache::fingerprint("background test program");
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> runs{0};
  std::atomic<bool> elsewhere{false};
  compiles.submit(fp, [&] {
    elsewhere = std::this_thread::get_id() != caller;
    ++runs;
  });
  compiles.submit(fp, [&] { ++runs; });  // queued or done already: not queued again
  compiles.wait_idle();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_TRUE(elsewhere.load());
  EXPECT_EQ(compiles.state(fp), BackgroundState::kReady);
}

TEST(BackgroundCompiles, AFailedJobReportsWhyAndTheWorkerGoesOn) {
  auto& compiles = BackgroundCompiles::get();
  const auto bad = cache::fingerprint("background test: failing");
  const auto good = cache::fingerprint("background test: after the failure");
  compiles.submit(bad, [] { throw std::runtime_error("no such op"); });
  compiles.submit(good, [] {});
  compiles.wait_idle();
  std::string error;
  EXPECT_EQ(compiles.state(bad, &error), BackgroundState::kFailed);
  EXPECT_EQ(error, "no such op");
  EXPECT_EQ(compiles.state(good), BackgroundState::kReady);
  EXPECT_EQ(compiles.state(cache::fingerprint("never submitted")), BackgroundState::kUnknown);
  compiles.known(cache::fingerprint("already compiled"));
  EXPECT_EQ(compiles.state(cache::fingerprint("already compiled")), BackgroundState::kReady);
}

}  // namespace
}  // namespace tpu::exec
