// hlo/reduce_plan.h: which reductions are emitted in two stages, and the shapes of the stages.
#include <gtest/gtest.h>

#include "hlo/builder.h"
#include "hlo/reduce_plan.h"

namespace tpu {
namespace {

using hlo::Dims;
using hlo::plan_reduce;

TEST(ReducePlan, AFullReductionBecomesRowsOfBlocksThenTheirSums) {
  const auto p = plan_reduce({16, 16, 32, 32}, {0, 1, 2, 3});
  ASSERT_TRUE(p.staged);
  EXPECT_EQ(p.rows, (Dims{256, 1024}));
  EXPECT_EQ(p.middle, (Dims{256}));
  EXPECT_EQ(p.second, (Dims{0}));
  EXPECT_TRUE(p.split);
  const auto flat = plan_reduce({262144}, {0});
  ASSERT_TRUE(flat.staged);
  EXPECT_EQ(flat.rows, (Dims{256, 1024}));
}

TEST(ReducePlan, BatchStatisticsReduceTheSpatialRunFirst) {
  const auto p = plan_reduce({16, 16, 32, 32}, {0, 2, 3});  // BatchNorm: N, H, W of NCHW
  ASSERT_TRUE(p.staged);
  EXPECT_EQ(p.rows, (Dims{256, 1024}));
  EXPECT_EQ(p.middle, (Dims{16, 16}));
  EXPECT_EQ(p.second, (Dims{0}));
  EXPECT_FALSE(p.split);
}

TEST(ReducePlan, LongRowsOfAHigherRankOperandAreSeenAsRank2) {
  const auto p = plan_reduce({16, 16, 1024}, {2});
  ASSERT_TRUE(p.staged);
  EXPECT_EQ(p.rows, (Dims{256, 1024}));
  EXPECT_EQ(p.middle, (Dims{16, 16}));
  EXPECT_TRUE(p.second.empty());
}

TEST(ReducePlan, AFewLongRowsAreSplitIntoBlocks) {
  const auto p = plan_reduce({8, 32768}, {1});
  ASSERT_TRUE(p.staged);
  EXPECT_EQ(p.rows, (Dims{256, 1024}));
  EXPECT_EQ(p.middle, (Dims{8, 32}));
  EXPECT_EQ(p.second, (Dims{1}));
}

TEST(ReducePlan, XlasOwnFormsStayOneReduce) {
  EXPECT_FALSE(plan_reduce({2048, 128}, {1}).staged);    // short rows (LayerNorm)
  EXPECT_FALSE(plan_reduce({256, 1024}, {1}).staged);    // already rank-2 rows
  EXPECT_FALSE(plan_reduce({16, 16, 64}, {0, 2}).staged);  // a short run
  EXPECT_FALSE(plan_reduce({2048, 128}, {0}).staged);    // the last dimension is kept
  EXPECT_FALSE(plan_reduce({4, 8, 8}, {0, 1, 2}).staged);  // few elements
  EXPECT_FALSE(plan_reduce({1021}, {0}).staged);         // no block divides the run
  EXPECT_FALSE(plan_reduce({0, 4096}, {0, 1}).staged);   // empty
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ReducePlan, TheBuilderEmitsBothStagesWithTheSameResultType) {
  hlo::Builder b;
  auto x = b.parameter(hlo::TensorType{ElementType::kF32, {16, 16, 32, 32}});
  auto zero = b.full(hlo::TensorType{ElementType::kF32, {}}, 0.0);
  auto per_channel = b.reduce(x, zero, {0, 2, 3}, hlo::ReduceKind::kSum);
  EXPECT_EQ(b.dims(per_channel), (Dims{16}));
  EXPECT_EQ(count(b.module_text({per_channel}), "\"stablehlo.reduce\""), 2u);
  // A split run: blocks by a windowed reduction (XLA would fold reduce(reduce) into one).
  hlo::Builder c;
  auto y = c.parameter(hlo::TensorType{ElementType::kF32, {16, 16, 32, 32}});
  auto total = c.reduce(y, c.full(hlo::TensorType{ElementType::kF32, {}}, 0.0), {0, 1, 2, 3}, hlo::ReduceKind::kSum);
  EXPECT_TRUE(c.dims(total).empty());
  const std::string text = c.module_text({total});
  EXPECT_EQ(count(text, "\"stablehlo.reduce_window\""), 1u);
  EXPECT_EQ(count(text, "\"stablehlo.reduce\""), 1u);
  // Max and min reductions are fast in XLA as they are: one reduce.
  hlo::Builder d;
  auto z = d.parameter(hlo::TensorType{ElementType::kF32, {16, 16, 32, 32}});
  auto top = d.reduce(z, d.full(hlo::TensorType{ElementType::kF32, {}}, 0.0), {0, 1, 2, 3}, hlo::ReduceKind::kMax);
  const std::string max_text = d.module_text({top});
  EXPECT_EQ(count(max_text, "\"stablehlo.reduce\""), 1u);
  EXPECT_EQ(count(max_text, "reduce_window"), 0u);
}

}  // namespace
}  // namespace tpu
