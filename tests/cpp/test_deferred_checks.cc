// DeferredChecks (runtime/deferred_checks.h): torch._assert_async verdicts kept for the next
// synchronization - evaluated only then, first failure reported, every check consumed, the list
// bounded with a failure found early kept.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "runtime/deferred_checks.h"

namespace tpu::runtime {
namespace {

DeferredChecks::Check check(bool verdict, std::string message, int* reads) {
  return {[verdict, reads] {
            ++*reads;
            return verdict;
          },
          std::move(message)};
}

TEST(DeferredChecks, NothingPendingIsNoFailure) {
  DeferredChecks checks;
  EXPECT_FALSE(checks.take_failure().has_value());
  EXPECT_NO_THROW(checks.raise_failure());
}

TEST(DeferredChecks, EvaluatedOnlyAtTheSynchronization) {
  DeferredChecks checks;
  int reads = 0;
  checks.add(check(true, "a", &reads));
  checks.add(check(false, "b", &reads));
  checks.add(check(false, "c", &reads));
  EXPECT_EQ(reads, 0);
  EXPECT_EQ(checks.stats().pending, 3u);
  auto failure = checks.take_failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(*failure, "b");  // the first one that failed
  EXPECT_EQ(reads, 3);        // all consumed
  EXPECT_EQ(checks.stats().pending, 0u);
  EXPECT_EQ(checks.stats().evaluated, 3u);
  EXPECT_EQ(checks.stats().failed, 2u);
  EXPECT_FALSE(checks.take_failure().has_value());
}

TEST(DeferredChecks, AFailedReadIsAFailureWithItsMessage) {
  DeferredChecks checks;
  checks.add({[]() -> bool { throw std::runtime_error("torch_tpu: device error in aten::ne: lost"); }, "m"});
  EXPECT_THROW(
      {
        try {
          checks.raise_failure();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "torch_tpu: device error in aten::ne: lost");
          throw;
        }
      },
      std::runtime_error);
}

TEST(DeferredChecks, BoundedAndAnEarlyFailureIsKept) {
  DeferredChecks checks;
  int reads = 0;
  checks.add(check(false, "oldest", &reads));
  for (size_t i = 0; i < DeferredChecks::kMaxPending; ++i) checks.add(check(true, "ok", &reads));
  EXPECT_LE(checks.stats().pending, DeferredChecks::kMaxPending);
  EXPECT_GT(reads, 0);  // the older half was evaluated when the bound was passed
  auto failure = checks.take_failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(*failure, "oldest");
  EXPECT_EQ(reads, static_cast<int>(DeferredChecks::kMaxPending) + 1);
}

}  // namespace
}  // namespace tpu::runtime
