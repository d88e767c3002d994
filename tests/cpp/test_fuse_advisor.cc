// FuseAdvisor (exec/fuse_advisor.h) on a simulated loop with a synthetic clock: a loop faster op
// by op runs strictly after its trials, one faster fused stays fused, windows in which something
// compiled or the mode changed are dropped, another read pattern is another pattern, long
// iterations are fused without a trial, and a pattern on its way to a verdict counts as pending.
#include <gtest/gtest.h>

#include <cstdint>

#include "exec/fuse_advisor.h"

namespace tpu::exec {
namespace {

constexpr uint64_t kFirst = 0x11;   // the iteration's first op
constexpr uint64_t kInside = 0x22;  // a graph start inside the iteration (after a host read)

// A loop of `ops` ops per iteration, taking `fused_s` seconds recorded and `strict_s` op by op,
// with a second graph start in the middle of each iteration.
struct Loop {
  FuseAdvisor advisor;
  double fused_s, strict_s;
  int64_t ops = 10;
  FuseAdvisor::Now now;
  int64_t strict_ops = 0;      // ops the advisor ran strictly
  int64_t strict_stretches = 0;
  uint64_t sig = 7;            // the fingerprints of the iteration's graphs

  Loop(FuseAdvisor::Config c, double fused, double strict) : advisor(c), fused_s(fused), strict_s(strict) {}

  // One iteration; returns whether it ran strictly.
  bool iteration() {
    const int64_t strict = advisor.start(kFirst, now);  // iterations to run strictly
    if (strict > 0) {
      EXPECT_EQ(advisor.marks_per_iteration(), 1);
      strict_ops += strict * advisor.ops_per_iteration();
      ++strict_stretches;
      now.seconds += strict_s * static_cast<double>(strict);
      return true;
    }
    for (int64_t i = 0; i < ops / 2; ++i) advisor.recorded(i == 0);
    advisor.flushed(sig);
    now.seconds += fused_s / 2;
    EXPECT_EQ(advisor.start(kInside, now), 0);  // only an iteration's first op starts a stretch
    for (int64_t i = 0; i < ops - ops / 2; ++i) advisor.recorded(false);
    advisor.flushed(sig + 1);
    now.seconds += fused_s / 2;
    return false;
  }
  void run(int iterations) {
    for (int i = 0; i < iterations; ++i) iteration();
  }
};

FuseAdvisor::Config quick() {
  FuseAdvisor::Config c;
  c.min_window_seconds = 0.0;
  c.strict_iterations = 20;
  return c;
}

TEST(FuseAdvisor, ALoopFasterOpByOpRunsStrictly) {
  Loop loop(quick(), 0.010, 0.005);
  loop.run(200);
  EXPECT_EQ(loop.advisor.stats().patterns_timed, 1);
  EXPECT_EQ(loop.advisor.stats().patterns_strict, 1);
  // After the verdict: stretches of strict_iterations, each followed by one recorded iteration.
  const int64_t before = loop.strict_ops;
  int strict = 0;
  for (int i = 0; i < 10; ++i) strict += loop.iteration();
  EXPECT_EQ(strict, 5);
  EXPECT_EQ(loop.strict_ops - before, 5 * 20 * loop.ops);
}

TEST(FuseAdvisor, ALoopFasterFusedStaysFused) {
  Loop loop(quick(), 0.005, 0.010);
  loop.run(200);
  EXPECT_EQ(loop.advisor.stats().patterns_timed, 1);
  EXPECT_EQ(loop.advisor.stats().patterns_strict, 0);
  const int64_t trials = loop.strict_stretches;
  EXPECT_GE(trials, quick().trials);
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(loop.iteration());
  EXPECT_EQ(loop.strict_stretches, trials);
}

TEST(FuseAdvisor, WithinTheMarginStaysFused) {
  Loop loop(quick(), 0.0100, 0.0095);  // strict 5% faster, under the 10% margin
  loop.run(200);
  EXPECT_EQ(loop.advisor.stats().patterns_timed, 1);
  EXPECT_EQ(loop.advisor.stats().patterns_strict, 0);
}

TEST(FuseAdvisor, WindowsWithCompilesOrAModeChangeAreDropped) {
  Loop loop(quick(), 0.010, 0.005);
  // Every strict stretch compiles (or changes the mode): no trial counts, and after a few the
  // pattern is left fused.
  for (int i = 0; i < 300; ++i) {
    const int64_t before = loop.strict_stretches;
    loop.iteration();
    if (loop.strict_stretches != before) {
      if (i % 2) {
        ++loop.now.compiles;
      } else {
        ++loop.now.epoch;
      }
    }
  }
  EXPECT_EQ(loop.advisor.stats().patterns_strict, 0);
  EXPECT_EQ(loop.advisor.stats().patterns_pending, 0);  // left fused: no verdict is coming
  EXPECT_LE(loop.strict_stretches, 2 * quick().trials + 2);
  const int64_t stretches = loop.strict_stretches;
  loop.run(50);
  EXPECT_EQ(loop.strict_stretches, stretches);
}

TEST(FuseAdvisor, AnotherReadPatternIsAnotherPattern) {
  Loop loop(quick(), 0.010, 0.005);
  loop.run(200);
  ASSERT_EQ(loop.advisor.stats().patterns_strict, 1);
  // The same loop with other graphs (another read pattern): timed again, here fused wins.
  loop.sig = 99;
  loop.fused_s = 0.002;
  loop.run(300);
  EXPECT_EQ(loop.advisor.stats().patterns_timed, 2);
  EXPECT_EQ(loop.advisor.stats().patterns_strict, 1);
  const int64_t stretches = loop.strict_stretches;
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(loop.iteration());
  EXPECT_EQ(loop.strict_stretches, stretches);
}

TEST(FuseAdvisor, LongIterationsAreFusedWithoutATrial) {
  Loop loop(quick(), 0.200, 0.010);
  loop.run(20);
  EXPECT_EQ(loop.strict_stretches, 0);
  EXPECT_EQ(loop.advisor.stats().patterns_timed, 1);
  EXPECT_EQ(loop.advisor.stats().patterns_strict, 0);
}

TEST(FuseAdvisor, AnInterruptStartsOver) {
  Loop loop(quick(), 0.010, 0.005);
  for (int i = 0; i < 300; ++i) {
    loop.advisor.interrupt();  // e.g. a capture in every iteration
    loop.iteration();
  }
  EXPECT_EQ(loop.strict_stretches, 0);
  EXPECT_EQ(loop.advisor.stats().patterns_timed, 0);
}

TEST(FuseAdvisor, PendingCountsPatternsOnTheirWayToAVerdict) {
  for (const double strict_s : {0.005, 0.020}) {  // either verdict
    Loop loop(quick(), 0.010, strict_s);
    loop.run(2);  // the first iteration, and one that is not yet steady
    EXPECT_EQ(loop.advisor.stats().patterns_pending, 0);
    loop.run(1);  // steady: counting clean iterations
    EXPECT_EQ(loop.advisor.stats().patterns_pending, 1);
    int iterations = 3;
    while (loop.advisor.stats().patterns_timed == 0 && iterations < 200) {
      EXPECT_EQ(loop.advisor.stats().patterns_pending, 1);
      loop.iteration();
      ++iterations;
    }
    EXPECT_EQ(loop.advisor.stats().patterns_timed, 1);
    EXPECT_EQ(loop.advisor.stats().patterns_pending, 0) << "the verdict ends it";
    EXPECT_GT(loop.strict_stretches, 0);  // the trials ran while it was pending
    loop.sig = 99;  // another read pattern: pending again until its own verdict
    loop.run(3);
    EXPECT_EQ(loop.advisor.stats().patterns_pending, 1);
    loop.run(300);
    EXPECT_EQ(loop.advisor.stats().patterns_timed, 2);
    EXPECT_EQ(loop.advisor.stats().patterns_pending, 0);
  }
}

}  // namespace
}  // namespace tpu::exec
