// Strided view reads and writes (lowering/view_access) executed on the CPU plugin and compared
// element by element with a host reference.
#include <gtest/gtest.h>

#include <numeric>

#include "hlo/builder.h"
#include "lowering/view_access.h"
#include "test_support.h"

namespace tpu {
namespace {

using hlo::Builder;
using hlo::Dims;
using hlo::TensorType;
using testing::HostArray;

struct ViewCase {
  const char* name;
  int64_t storage;
  Dims sizes;
  Dims strides;
  int64_t offset;
};

// Linear storage positions of the view's elements in row-major order of `sizes`.
std::vector<int64_t> positions(const ViewCase& c) {
  int64_t n = 1;
  for (int64_t s : c.sizes) n *= s;
  std::vector<int64_t> out;
  for (int64_t linear = 0; linear < n; ++linear) {
    int64_t rest = linear, pos = c.offset;
    for (int64_t d = static_cast<int64_t>(c.sizes.size()) - 1; d >= 0; --d) {
      pos += (rest % c.sizes[d]) * c.strides[d];
      rest /= c.sizes[d];
    }
    out.push_back(pos);
  }
  return out;
}

std::vector<float> iota_storage(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

const std::vector<ViewCase> kReadCases = {
    {"contiguous_at_offset", 20, {2, 3}, {3, 1}, 5},
    {"transpose", 12, {4, 3}, {1, 4}, 0},
    {"column", 12, {3}, {4}, 2},
    {"step_slice", 30, {3, 2}, {10, 3}, 1},
    {"narrowed_rows", 15, {3, 4}, {5, 1}, 1},
    {"diagonal", 16, {4}, {5}, 0},
    {"expand", 6, {4, 3}, {0, 1}, 3},
    {"scalar_broadcast", 6, {2, 2}, {0, 0}, 4},
    {"permute3d", 24, {4, 2, 3}, {1, 12, 4}, 0},
    {"unfold_overlapping", 10, {4, 3}, {2, 1}, 0},
    {"non_nested", 12, {2, 3}, {4, 3}, 1},
    {"size_one_dims", 10, {1, 3, 1}, {7, 2, 99}, 1},
    {"empty", 10, {0, 3}, {3, 1}, 0},
    // Room after the view for its whole box (read as a plain slice when the offset is known).
    {"last_dim_slice_with_room", 40, {4, 3}, {8, 1}, 8},
    {"step_slice_with_room", 40, {3, 2}, {10, 3}, 1},
    // The second half of every row: the box from the offset overruns the storage; a known offset
    // reads it as one strided slice of the storage seen as rows (and 3-d: the second half of the
    // last dim of [2, 3, 4] inside a [2, 3, 8] storage; a storage with a partial row at its end).
    {"tail_of_every_row", 32, {4, 4}, {8, 1}, 4},
    {"tail_of_every_row_3d", 48, {2, 3, 4}, {24, 8, 1}, 4},
    {"partial_last_row", 35, {4, 3}, {8, 1}, 5},
};

class ReadStrided : public ::testing::TestWithParam<ViewCase> {};

TEST_P(ReadStrided, MatchesHostReference) {
  const ViewCase& c = GetParam();
  Builder b;
  auto flat = b.parameter(TensorType{ElementType::kF32, {c.storage}});
  auto offset = b.parameter(TensorType{ElementType::kI64, {}});
  auto out = lowering::read_strided(b, flat, offset, c.sizes, c.strides);
  EXPECT_EQ(b.dims(out), c.sizes);
  auto result = testing::run_program(
      b.module_text({out}), {HostArray::of<float>(ElementType::kF32, {c.storage}, iota_storage(c.storage)),
                             HostArray::of<int64_t>(ElementType::kI64, {}, {c.offset})});
  std::vector<float> expected;
  for (int64_t p : positions(c)) expected.push_back(static_cast<float>(p));
  EXPECT_EQ(result[0].values<float>(), expected);
}

INSTANTIATE_TEST_SUITE_P(Views, ReadStrided, ::testing::ValuesIn(kReadCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The same views with the offset baked in as a constant (as captured programs build them).
class ReadStridedKnownOffset : public ::testing::TestWithParam<ViewCase> {};

TEST_P(ReadStridedKnownOffset, MatchesHostReference) {
  const ViewCase& c = GetParam();
  Builder b;
  auto flat = b.parameter(TensorType{ElementType::kF32, {c.storage}});
  auto offset = b.constant_int(ElementType::kI64, c.offset);
  auto out = lowering::read_strided(b, flat, offset, c.sizes, c.strides);
  auto result = testing::run_program(
      b.module_text({out}), {HostArray::of<float>(ElementType::kF32, {c.storage}, iota_storage(c.storage))});
  std::vector<float> expected;
  for (int64_t p : positions(c)) expected.push_back(static_cast<float>(p));
  EXPECT_EQ(result[0].values<float>(), expected);
}

INSTANTIATE_TEST_SUITE_P(Views, ReadStridedKnownOffset, ::testing::ValuesIn(kReadCases),
                         [](const auto& info) { return std::string(info.param.name); });

// A slice of the last dim (q/k/v of a fused projection, K and V halves of a cache row) at a known
// offset reads the storage directly: no zero padding, which would cost a bounds test per element
// in every fused loop reading the view. The last view reaches past the storage's end when boxed,
// so it keeps the padding when the offset is not known, or when the view crosses the storage's rows.
TEST(ReadStrided, KnownOffsetsNeedNoPadding) {
  auto text_for = [](int64_t storage, int64_t offset, bool known) {
    Builder b;
    auto flat = b.parameter(TensorType{ElementType::kF32, {storage}});
    auto off = known ? b.constant_int(ElementType::kI64, offset) : b.parameter(TensorType{ElementType::kI64, {}});
    return b.module_text({lowering::read_strided(b, flat, off, {4, 3}, {8, 1})});
  };
  // The box: 4 rows of 8 (27 elements needed, 32 boxed).
  EXPECT_EQ(text_for(40, 0, true).find("stablehlo.pad"), std::string::npos);
  EXPECT_EQ(text_for(40, 8, true).find("stablehlo.pad"), std::string::npos);
  EXPECT_EQ(text_for(40, 9, true).find("stablehlo.pad"), std::string::npos);
  EXPECT_EQ(text_for(40, 9, true).find("stablehlo.dynamic_slice"), std::string::npos);
  EXPECT_NE(text_for(41, 14, true).find("stablehlo.pad"), std::string::npos);  // crosses rows
  EXPECT_NE(text_for(40, 0, false).find("stablehlo.pad"), std::string::npos);
}

const std::vector<ViewCase> kWriteCases = {
    {"contiguous_at_offset", 20, {2, 3}, {3, 1}, 5},
    {"transpose", 12, {4, 3}, {1, 4}, 0},
    {"column", 12, {3}, {4}, 2},
    {"step_slice", 30, {3, 2}, {10, 3}, 1},
    {"narrowed_rows", 15, {3, 4}, {5, 1}, 1},
    {"diagonal", 16, {4}, {5}, 0},
    {"permute3d", 24, {4, 2, 3}, {1, 12, 4}, 0},
    {"non_nested", 12, {2, 3}, {4, 3}, 1},
    {"whole", 6, {6}, {1}, 0},
};

class WriteStrided : public ::testing::TestWithParam<ViewCase> {};

TEST_P(WriteStrided, MatchesHostReference) {
  const ViewCase& c = GetParam();
  Builder b;
  auto flat = b.parameter(TensorType{ElementType::kF32, {c.storage}});
  auto offset = b.parameter(TensorType{ElementType::kI64, {}});
  auto value = b.parameter(TensorType{ElementType::kF32, c.sizes});
  auto out = lowering::write_strided(b, flat, offset, c.sizes, c.strides, value);
  const auto pos = positions(c);
  std::vector<float> vals(pos.size());
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = -1.0f - static_cast<float>(i);
  auto result = testing::run_program(
      b.module_text({out}), {HostArray::of<float>(ElementType::kF32, {c.storage}, iota_storage(c.storage)),
                             HostArray::of<int64_t>(ElementType::kI64, {}, {c.offset}),
                             HostArray::of<float>(ElementType::kF32, c.sizes, vals)});
  std::vector<float> expected = iota_storage(c.storage);
  for (size_t i = 0; i < pos.size(); ++i) expected[pos[i]] = vals[i];
  EXPECT_EQ(result[0].values<float>(), expected);
}

INSTANTIATE_TEST_SUITE_P(Views, WriteStrided, ::testing::ValuesIn(kWriteCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(WriteStrided, RefusesOverlappingViews) {
  Builder b;
  auto flat = b.parameter(TensorType{ElementType::kF32, {6}});
  auto offset = b.parameter(TensorType{ElementType::kI64, {}});
  auto value = b.parameter(TensorType{ElementType::kF32, {2, 3}});
  EXPECT_THROW(lowering::write_strided(b, flat, offset, {2, 3}, {0, 1}, value), std::invalid_argument);
}

TEST(Reinterpret, FloatBytesRoundTripThroughUint8) {
  Builder b;
  auto flat = b.parameter(TensorType{ElementType::kF32, {2}});
  auto bytes = lowering::reinterpret_flat(b, flat, ElementType::kU8);
  auto back = lowering::reinterpret_flat(b, bytes, ElementType::kF32);
  EXPECT_EQ(b.dims(bytes), (Dims{8}));
  std::vector<float> host{1.5f, -2.25f};
  auto result = testing::run_program(b.module_text({bytes, back}),
                                     {HostArray::of<float>(ElementType::kF32, {2}, host)});
  std::string expected(8, '\0');
  std::memcpy(expected.data(), host.data(), 8);  // little-endian memory order
  EXPECT_EQ(result[0].bytes, expected);
  EXPECT_EQ(result[1].values<float>(), host);
}

TEST(Reinterpret, BoolIsOneByteZeroOrOne) {
  Builder b;
  auto flat = b.parameter(TensorType{ElementType::kBool, {3}});
  auto bytes = lowering::reinterpret_flat(b, flat, ElementType::kU8);
  auto result = testing::run_program(b.module_text({bytes}),
                                     {HostArray::of<uint8_t>(ElementType::kBool, {3}, {1, 0, 1})});
  EXPECT_EQ(result[0].values<uint8_t>(), (std::vector<uint8_t>{1, 0, 1}));
}

}  // namespace
}  // namespace tpu
