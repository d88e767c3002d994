// common::InlineVector (hlo::Dims and the per-op index lists of exec/): values kept inline up to
// N and on the heap beyond, std::vector's behaviour for every operation this code base uses, and
// no allocation at all for the shapes, strides and layouts of ordinary ops (the reason it exists:
// as std::vector they were a large share of the host's allocations per recorded op).
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <new>
#include <vector>

#include "common/inline_vector.h"
#include "exec/op_call.h"
#include "exec/program_builder.h"
#include "hlo/tensor_type.h"

// Allocations made by the calling thread (other threads of the test binary may allocate too).
namespace {
thread_local long thread_allocations = 0;
}  // namespace

void* operator new(size_t n) {
  ++thread_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace tpu::common {
namespace {

using Small = InlineVector<int64_t, 4>;

long allocations_during(const std::function<void()>& f) {
  const long before = thread_allocations;
  f();
  return thread_allocations - before;
}

TEST(InlineVector, KeepsUpToNInsideAndMovesToTheHeapBeyond) {
  Small v;
  EXPECT_EQ(allocations_during([&] {
              for (int64_t i = 0; i < 4; ++i) v.push_back(i * 10);
            }),
            0);
  EXPECT_EQ(v.capacity(), 4u);
  EXPECT_EQ(allocations_during([&] { v.push_back(40); }), 1);
  EXPECT_GE(v.capacity(), 5u);
  EXPECT_EQ(std::vector<int64_t>(v), (std::vector<int64_t>{0, 10, 20, 30, 40}));
}

TEST(InlineVector, CopiesAreIndependentAndMovesLeaveTheSourceEmpty) {
  for (size_t n : {3u, 9u}) {  // inline and on the heap
    Small a;
    for (size_t i = 0; i < n; ++i) a.push_back(static_cast<int64_t>(i));
    Small b = a;
    b[0] = 99;
    EXPECT_EQ(a[0], 0);
    Small c = std::move(b);
    EXPECT_TRUE(b.empty());  // NOLINT: the moved-from state is specified here
    EXPECT_EQ(c.size(), n);
    EXPECT_EQ(c[0], 99);
    b = c;  // a moved-from vector is usable
    EXPECT_EQ(b, c);
    Small d;
    d = std::move(c);
    EXPECT_EQ(d, b);
    d.swap(a);
    EXPECT_EQ(d[0], 0);
    EXPECT_EQ(a[0], 99);
  }
}

TEST(InlineVector, BehavesAsStdVector) {
  const std::vector<int64_t> ref{5, 6, 7, 8, 9, 10};
  Small v(ref);  // from std::vector
  EXPECT_EQ(v, ref);
  std::vector<int64_t> back = v;  // and back
  EXPECT_EQ(back, ref);

  v.insert(v.begin() + 1, 1);
  v.insert(v.end(), {11, 12});
  v.erase(v.begin() + 2, v.begin() + 4);  // 6, 7
  EXPECT_EQ(std::vector<int64_t>(v), (std::vector<int64_t>{5, 1, 8, 9, 10, 11, 12}));
  v.insert(v.begin(), v.begin() + 5, v.end());  // a range of itself
  EXPECT_EQ(std::vector<int64_t>(v), (std::vector<int64_t>{11, 12, 5, 1, 8, 9, 10, 11, 12}));
  v.push_back(v[0]);  // an element of itself, at a growth
  EXPECT_EQ(v.back(), 11);

  v.resize(2);
  EXPECT_EQ(std::vector<int64_t>(v), (std::vector<int64_t>{11, 12}));
  v.resize(4, 7);
  EXPECT_EQ(std::vector<int64_t>(v), (std::vector<int64_t>{11, 12, 7, 7}));
  v.assign(3, 1);
  EXPECT_EQ(v, (Small{1, 1, 1}));
  EXPECT_EQ(Small(2, 5), (Small{5, 5}));
  EXPECT_EQ(Small(3), (Small{0, 0, 0}));
  EXPECT_LT((Small{1, 2}), (Small{1, 3}));
  EXPECT_NE((Small{1, 2}), (Small{1, 2, 0}));
  EXPECT_THROW(v.at(3), std::out_of_range);
  v.clear();
  EXPECT_TRUE(v.empty());
}

TEST(InlineVector, OrdinaryShapesViewsAndLayoutsAllocateNothingForTheirDims) {
  // A rank-4 tensor type and view: copying them was four allocations with std::vector.
  hlo::TensorType type{ElementType::kF32, {8, 16, 32, 64}};
  exec::View view;
  view.sizes = {8, 16, 32, 64};
  view.strides = {32768, 2048, 64, 1};
  EXPECT_EQ(allocations_during([&] {
              hlo::TensorType t = type;
              exec::View w = view;
              w.sizes.push_back(1);
              w.strides.push_back(1);
              t.dims.insert(t.dims.begin(), 2);
            }),
            0);
  // A call's per-input and per-output lists of a layout: the slots vector is its one allocation.
  exec::CallLayout layout;
  EXPECT_EQ(allocations_during([&] {
              for (int i = 0; i < 3; ++i) {
                layout.input_slot.push_back(i);
                layout.input_identity.push_back(true);
              }
              layout.output_slot.push_back(-1);
              layout.output_whole.push_back(false);
            }),
            0);
}

}  // namespace
}  // namespace tpu::common
