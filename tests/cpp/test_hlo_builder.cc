// The StableHLO text builder: type checking, literal spelling, module structure, and a few
// ops executed on the CPU plugin.
#include <gtest/gtest.h>

#include <cmath>

#include "common/half_bits.h"
#include "hlo/builder.h"
#include "hlo/literal.h"
#include "test_support.h"

namespace tpu {
namespace {

using hlo::Builder;
using hlo::TensorType;
using testing::HostArray;

TEST(TensorType, PrintsMlirAndReadableForms) {
  EXPECT_EQ((TensorType{ElementType::kBF16, {2, 3}}.mlir()), "tensor<2x3xbf16>");
  EXPECT_EQ((TensorType{ElementType::kBool, {}}.mlir()), "tensor<i1>");
  EXPECT_EQ((TensorType{ElementType::kU8, {4}}.str()), "uint8[4]");
}

TEST(Literal, HalfPrecisionBitsRoundToNearestEven) {
  EXPECT_EQ(f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(f16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(f16_bits(1e6f), 0x7C00);
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits(1.00390625f), 0x3F80);  // halfway, rounds to even
  EXPECT_EQ(bf16_bits(1.01171875f), 0x3F82);
  EXPECT_EQ(hlo::float_literal(ElementType::kF32, 1.0), "0x3F800000");
  EXPECT_EQ(hlo::float_literal(ElementType::kF64, -0.0), "0x8000000000000000");
  EXPECT_EQ(hlo::int_literal(ElementType::kBool, 1), "true");
}

TEST(Builder, RejectsMismatchedOperands) {
  Builder b;
  auto x = b.parameter(TensorType{ElementType::kF32, {2}});
  auto y = b.parameter(TensorType{ElementType::kF32, {3}});
  EXPECT_THROW(b.add(x, y), std::invalid_argument);
  EXPECT_THROW(b.reshape(x, {3}), std::invalid_argument);
  EXPECT_THROW(b.broadcast_to(y, {2, 2}), std::invalid_argument);
}

TEST(Builder, IdentityShapeOpsEmitNothing) {
  Builder b;
  auto x = b.parameter(TensorType{ElementType::kF32, {2, 3}});
  EXPECT_EQ(b.reshape(x, {2, 3}).id, x.id);
  EXPECT_EQ(b.transpose(x, {0, 1}).id, x.id);
  EXPECT_EQ(b.convert(x, ElementType::kF32).id, x.id);
  EXPECT_EQ(b.module_text({x}).find("stablehlo."), std::string::npos);
}

TEST(Builder, ContractionPrecisionIsWrittenPerOperand) {
  Builder b;
  auto x = b.parameter(TensorType{ElementType::kF32, {2, 3}});
  auto y = b.parameter(TensorType{ElementType::kF32, {3, 4}});
  auto high = b.dot_general(x, y, {}, {}, {1}, {0}, ElementType::kF32, hlo::Precision::kHigh);
  auto plain = b.dot_general(x, y, {}, {}, {1}, {0}, ElementType::kF32, hlo::Precision::kDefault);
  const std::string text = b.module_text({high, plain});
  EXPECT_NE(text.find("[#stablehlo<precision HIGH>, #stablehlo<precision HIGH>]"), std::string::npos) << text;
  EXPECT_EQ(text.find("HIGHEST"), std::string::npos) << text;
  size_t dots = 0, configs = 0;
  for (size_t at = text.find("dot_general"); at != std::string::npos; at = text.find("dot_general", at + 1)) ++dots;
  for (size_t at = text.find("precision_config"); at != std::string::npos; at = text.find("precision_config", at + 1)) {
    ++configs;
  }
  EXPECT_EQ(dots, 2u);
  EXPECT_EQ(configs, 1u);  // DEFAULT writes none
}

TEST(Builder, ComparisonsNameTheirType) {
  // Left implicit, XLA's CPU constant folder compared signed integers as unsigned.
  Builder b;
  auto i = b.parameter(TensorType{ElementType::kI64, {1}});
  auto u = b.parameter(TensorType{ElementType::kU8, {1}});
  auto f = b.parameter(TensorType{ElementType::kF32, {1}});
  auto r1 = b.compare(i, i, hlo::Compare::kLE);
  auto r2 = b.compare(u, u, hlo::Compare::kLT);
  auto r3 = b.compare(f, f, hlo::Compare::kEQ);
  const std::string text = b.module_text({r1, r2, r3});
  EXPECT_NE(text.find("comparison_type SIGNED"), std::string::npos);
  EXPECT_NE(text.find("comparison_type UNSIGNED"), std::string::npos);
  EXPECT_NE(text.find("comparison_type FLOAT"), std::string::npos);
}

TEST(Builder, AliasedParameterIsAnnotated) {
  Builder b;
  auto x = b.parameter(TensorType{ElementType::kF32, {2}});
  b.alias_parameter_to_output(x, 0);
  EXPECT_NE(b.module_text({b.neg(x)}).find("tf.aliasing_output = 0 : i32"), std::string::npos);
}

TEST(Builder, ReduceDotAndConstantsRun) {
  Builder b;
  auto x = b.parameter(TensorType{ElementType::kF32, {2, 3}});
  auto y = b.parameter(TensorType{ElementType::kF32, {3, 2}});
  auto sum = b.reduce(x, b.constant(ElementType::kF32, 0), {1}, hlo::ReduceKind::kSum);
  auto mx = b.reduce(x, b.constant(ElementType::kF32, -INFINITY), {0, 1}, hlo::ReduceKind::kMax);
  auto prod = b.dot_general(x, y, {}, {}, {1}, {0}, ElementType::kF32, true);
  auto half = b.convert(b.full(TensorType{ElementType::kF32, {2}}, 0.1), ElementType::kBF16);
  auto out = testing::run_program(
      b.module_text({sum, mx, prod, half}),
      {HostArray::of<float>(ElementType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}),
       HostArray::of<float>(ElementType::kF32, {3, 2}, {1, 0, 0, 1, 1, 1})});
  EXPECT_EQ(out[0].values<float>(), (std::vector<float>{6, 15}));
  EXPECT_EQ(out[1].values<float>(), (std::vector<float>{6}));
  EXPECT_EQ(out[2].values<float>(), (std::vector<float>{4, 5, 10, 11}));
  EXPECT_EQ(out[3].values<uint16_t>(), (std::vector<uint16_t>{bf16_bits(0.1f), bf16_bits(0.1f)}));
}

TEST(Builder, RngBitGeneratorIsDeterministicPerState) {
  Builder b;
  auto state = b.parameter(TensorType{ElementType::kU64, {2}});
  auto bits = b.rng_bit_generator(state, TensorType{ElementType::kU32, {8}}).second;
  const std::string text = b.module_text({bits});
  auto s1 = HostArray::of<uint64_t>(ElementType::kU64, {2}, {42, 0});
  auto s2 = HostArray::of<uint64_t>(ElementType::kU64, {2}, {43, 0});
  auto a = testing::run_program(text, {s1})[0].values<uint32_t>();
  auto a2 = testing::run_program(text, {s1})[0].values<uint32_t>();
  auto c = testing::run_program(text, {s2})[0].values<uint32_t>();
  EXPECT_EQ(a, a2);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace tpu
