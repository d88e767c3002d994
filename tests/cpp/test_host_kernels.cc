// Host kernels (csrc/host_kernels/): registered with the real XLA CPU plugin through PJRT's FFI
// extension and called from a compiled StableHLO program, compared with a direct computation;
// invalid calls come back as the program's error, naming the problem.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "host_kernels/packed_matmul.h"
#include "host_kernels/paged_decode_attention.h"
#include "host_kernels/registry.h"
#include "pjrt/error.h"
#include "pjrt/ffi_extension.h"
#include "test_support.h"

namespace tpu::testing {
namespace {

// The shared plugin, with the host kernels registered once per process.
bool registered() {
  static const bool ok = [] {
    auto names = host_kernels::register_all(cpu_plugin()->api(), "Host");
    return names == std::vector<std::string>{host_kernels::kPagedDecodeAttention, host_kernels::kPackedMatmul};
  }();
  return ok;
}

// G=2 requests, H=2 query heads over KVH=1 kv head, D=4, blocks of 2 tokens, 4 blocks; the
// cache row of a token is [key | value] (width 8).
constexpr const char* kProgram = R"(
module @m {
  func.func public @main(%q: tensor<2x2x4xf32>, %c: tensor<4x2x1x8xf32>, %t: tensor<2x2xi32>, %p: tensor<2xi32>) -> (tensor<2x2x4xf32>) {
    %0 = "stablehlo.custom_call"(%q, %c, %c, %t, %p) {call_target_name = "torch_tpu_paged_decode_attention", api_version = 4 : i32, backend_config = {k_offset = 0 : i64, scale = 5.000000e-01 : f32, soft_cap = 0.000000e+00 : f32, v_offset = 4 : i64, window = 0 : i64}} : (tensor<2x2x4xf32>, tensor<4x2x1x8xf32>, tensor<4x2x1x8xf32>, tensor<2x2xi32>, tensor<2xi32>) -> tensor<2x2x4xf32>
    "func.return"(%0) : (tensor<2x2x4xf32>) -> ()
  }
})";

std::vector<float> expected(const std::vector<float>& q, const std::vector<float>& cache,
                            const std::vector<int32_t>& table, const std::vector<int32_t>& pos) {
  std::vector<float> out(2 * 2 * 4, 0.0f);
  for (int g = 0; g < 2; ++g) {
    for (int h = 0; h < 2; ++h) {
      std::vector<double> w;
      std::vector<const float*> rows;
      for (int t = 0; t <= pos[g]; ++t) {
        const float* row = &cache[(table[g * 2 + t / 2] * 2 + t % 2) * 8];
        double s = 0;
        for (int d = 0; d < 4; ++d) s += q[(g * 2 + h) * 4 + d] * row[d];
        w.push_back(0.5 * s);
        rows.push_back(row);
      }
      double m = w[0], z = 0;
      for (double x : w) m = std::max(m, x);
      for (double& x : w) z += (x = std::exp(x - m));
      for (size_t t = 0; t < w.size(); ++t) {
        for (int d = 0; d < 4; ++d) out[(g * 2 + h) * 4 + d] += static_cast<float>(w[t] / z * rows[t][4 + d]);
      }
    }
  }
  return out;
}

TEST(HostKernels, TheCpuPluginRegistersThem) {
  EXPECT_TRUE(pjrt::has_ffi_handler_registration(cpu_plugin()->api()));
  EXPECT_TRUE(registered());
}

TEST(HostKernels, PagedDecodeAttentionReadsTheBlocksInPlace) {
  ASSERT_TRUE(registered());
  std::vector<float> q(16), cache(4 * 2 * 8);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.7f * i);
  for (size_t i = 0; i < cache.size(); ++i) cache[i] = std::cos(0.3f * i);
  // Request 0 holds blocks 3, 1 and is at position 2 (3 keys); request 1 block 2 only, position 1.
  std::vector<int32_t> table{3, 1, 2, 0}, pos{2, 1};
  auto out = run_program(kProgram, {HostArray::of(ElementType::kF32, {2, 2, 4}, q),
                                    HostArray::of(ElementType::kF32, {4, 2, 1, 8}, cache),
                                    HostArray::of(ElementType::kI32, {2, 2}, table),
                                    HostArray::of(ElementType::kI32, {2}, pos)});
  ASSERT_EQ(out.size(), 1u);
  const std::vector<float> got = out[0].values<float>();
  const std::vector<float> want = expected(q, cache, table, pos);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST(HostKernels, ABlockOutsideTheCacheIsTheProgramsError) {
  ASSERT_TRUE(registered());
  std::vector<float> q(16, 1.0f), cache(4 * 2 * 8, 1.0f);
  std::vector<int32_t> table{3, 9, 2, 0}, pos{3, 0};
  try {
    run_program(kProgram, {HostArray::of(ElementType::kF32, {2, 2, 4}, q),
                           HostArray::of(ElementType::kF32, {4, 2, 1, 8}, cache),
                           HostArray::of(ElementType::kI32, {2, 2}, table),
                           HostArray::of(ElementType::kI32, {2}, pos)});
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("request 0 reads block 9 of a cache with 4 blocks"), std::string::npos)
        << e.what();
  }
}

// The packed product against a direct one, with this CPU's blocks and the portable ones: row
// counts around the 12-row register block (a sliver, two near-equal blocks), a partial last
// panel, K = 1 and more panels than tasks.
TEST(HostKernels, PackedMatmulEqualsTheDirectProduct) {
  const int64_t P = host_kernels::kPackedPanel;
  for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{
           {1, 7, 5}, {12, 16, 32}, {13, 33, 70}, {25, 1, 64}, {40, 64, 300}, {3, 128, 1000}}) {
    std::vector<float> x(m * k), w(k * n), packed(((n + P - 1) / P) * k * P, 0.0f), y(m * n, -1.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * i);
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.11 * i);
    for (int64_t r = 0; r < k; ++r)
      for (int64_t c = 0; c < n; ++c) packed[(c / P) * k * P + r * P + c % P] = w[r * n + c];
    for (bool portable : {false, true}) {
      host_kernels::packed_matmul(x.data(), m, k, packed.data(), n, y.data(), portable);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t r = 0; r < k; ++r) s += double(x[i * k + r]) * w[r * n + j];
          ASSERT_NEAR(y[i * n + j], s, 1e-4 * (1 + std::fabs(s)))
              << m << "x" << k << "x" << n << (portable ? " portable" : "") << " at " << i << "," << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tpu::testing
