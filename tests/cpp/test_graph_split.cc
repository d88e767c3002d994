// split_for_read (exec/graph_split.h): a recorded graph split at a host read into the read
// value's dependency closure and the rest - the closure, the values passed between the parts,
// the too-small rest, and which outputs may take an input's buffer.
#include <gtest/gtest.h>

#include <vector>

#include "exec/graph_split.h"

namespace tpu::exec {
namespace {

// A graph given as per-node (reads, writes); values are numbered by the test.
struct TestGraph {
  std::vector<NodeValues> reads, writes;
  GraphShape shape(size_t num_values, std::vector<int> params, std::vector<int> outputs,
                   std::vector<int> aliases) const {
    GraphShape g;
    g.num_values = num_values;
    for (size_t j = 0; j < reads.size(); ++j) {
      g.reads.push_back(&reads[j]);
      g.writes.push_back(&writes[j]);
    }
    g.params = std::move(params);
    g.outputs = std::move(outputs);
    g.aliases = std::move(aliases);
    return g;
  }
};

// Values: 0 = w (param 0), 1 = x (param 1).
// n0: 2 = f(w, x)      forward
// n1: 3 = sum(2)       the loss (read)
// n2: 4 = g(2, w)      backward: reads the forward's intermediate and w
// n3: 5 = w - 4        the update of w (w's newest value)
TestGraph training() { return {{{0, 1}, {2}, {2, 0}, {0, 4}}, {{2}, {3}, {4}, {5}}}; }

TEST(GraphSplit, ClosureFirstRestBehindIt) {
  TestGraph t = training();
  auto split = split_for_read(t.shape(6, {0, 1}, {3, 5}, {-1, 0}), 3, 1);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->first.nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(split->first.inputs, (std::vector<int>{0, 1}));
  // The loss (a graph output) and the intermediate the rest reads.
  EXPECT_EQ(split->first.outputs, (std::vector<int>{2, 3}));
  EXPECT_EQ(split->first.aliases, (std::vector<int>{-1, -1}));
  EXPECT_EQ(split->rest.nodes, (std::vector<int>{2, 3}));
  // The parameters it reads, then the first part's outputs it reads.
  EXPECT_EQ(split->rest.inputs, (std::vector<int>{0, 2}));
  EXPECT_EQ(split->rest.outputs, (std::vector<int>{5}));
  // w's update may take w's buffer (the run-time check refuses it while the first runs).
  EXPECT_EQ(split->rest.aliases, (std::vector<int>{0}));
}

TEST(GraphSplit, SmallRestIsNotSplit) {
  TestGraph t = training();
  EXPECT_FALSE(split_for_read(t.shape(6, {0, 1}, {3, 5}, {-1, 0}), 3, 3).has_value());
}

TEST(GraphSplit, WholeGraphClosureIsNotSplit) {
  TestGraph chain{{{0}, {1}}, {{1}, {2}}};  // 1 = f(0), 2 = g(1): reading 2 needs everything
  EXPECT_FALSE(split_for_read(chain.shape(3, {0}, {2}, {-1}), 2, 0).has_value());
}

TEST(GraphSplit, ParameterOrOutOfRangeReadIsNotSplit) {
  TestGraph t = training();
  EXPECT_FALSE(split_for_read(t.shape(6, {0, 1}, {3, 5}, {-1, 0}), 0, 0).has_value());
  EXPECT_FALSE(split_for_read(t.shape(6, {0, 1}, {3, 5}, {-1, 0}), 17, 0).has_value());
  EXPECT_FALSE(split_for_read(t.shape(6, {0, 1}, {3, 5}, {-1, 0}), -1, 0).has_value());
}

// The first part overwrites a (value 0 -> 3) whose old value the rest reads: no donation there.
// n0: 2 = a * 2   (rest)
// n1: 3 = a * 3   (first; a's newest value)
// n2: 4 = sum(3)  (read)
// n3: 5 = 2 + 1   (rest)
TEST(GraphSplit, FirstNeverTakesABufferTheRestReads) {
  TestGraph t{{{0}, {0}, {3}, {2}}, {{2}, {3}, {4}, {5}}};
  auto split = split_for_read(t.shape(6, {0}, {3, 4, 5}, {0, -1, -1}), 4, 1);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->first.nodes, (std::vector<int>{1, 2}));
  EXPECT_EQ(split->first.outputs, (std::vector<int>{3, 4}));
  EXPECT_EQ(split->first.aliases, (std::vector<int>{-1, -1}));
  EXPECT_EQ(split->rest.inputs, (std::vector<int>{0}));
  EXPECT_EQ(split->rest.outputs, (std::vector<int>{5}));
  EXPECT_EQ(split->rest.aliases, (std::vector<int>{-1}));
}

TEST(GraphSplit, FirstTakesABufferOnlyItReads) {
  // n0: 1 = p * 2 (first; p's newest value), n1: 2 = sum(1) (read), n2: 3 = q + 1 (rest)
  TestGraph t{{{0}, {1}, {4}}, {{1}, {2}, {3}}};
  auto split = split_for_read(t.shape(5, {0, 4}, {1, 2, 3}, {0, -1, 1}), 2, 1);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->first.inputs, (std::vector<int>{0}));
  EXPECT_EQ(split->first.outputs, (std::vector<int>{1, 2}));
  EXPECT_EQ(split->first.aliases, (std::vector<int>{0, -1}));
  EXPECT_EQ(split->rest.inputs, (std::vector<int>{4}));
  EXPECT_EQ(split->rest.aliases, (std::vector<int>{0}));
}

}  // namespace
}  // namespace tpu::exec
