// exec/program_cache: the one cache of per-op and graph programs every runner shares, against
// the real XLA CPU plugin - signature hits and misses, compiles through the compilation cache,
// the device scalar cache and the shape-churn counter.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "exec/program_cache.h"
#include "runtime/device_storage.h"
#include "test_support.h"

namespace tpu {
namespace {

using exec::OpCall;
using exec::ProgramCache;

// A cache of its own compiling on the shared test client, with the disk tier off (no files).
std::unique_ptr<ProgramCache> new_cache(size_t max_op_programs = 2048) {
  ::setenv("TORCH_TPU_CACHE_DIR", "disabled", 1);
  return std::make_unique<ProgramCache>(
      [] { return exec::CompileTarget{&testing::cpu_client(), "test cpu client"}; }, max_op_programs);
}

// full(shape, value): a program with one runtime scalar argument and no storage.
OpCall full_call(hlo::Dims shape, double value) {
  OpCall call;
  call.op = "full";
  call.label = "test::full";
  call.attrs.set_ints("shape", std::move(shape));
  call.inputs.push_back(exec::Input::of_scalar(exec::ScalarValue::floating(ElementType::kF32, value)));
  call.outputs.push_back(std::nullopt);
  return call;
}

std::shared_ptr<const exec::OpProgram> program_of(ProgramCache& cache, const OpCall& call) {
  const exec::CallLayout layout = exec::layout_of(call);
  return cache.op_program(call, layout, exec::signature(call, layout));
}

std::vector<float> to_floats(const pjrt::Buffer& b, size_t n) {
  std::vector<float> v(n);
  b.to_host(v.data(), n * sizeof(float));
  return v;
}

TEST(ProgramCache, SignatureMissBuildsAndHitReturnsTheSameProgram) {
  auto cache = new_cache();
  auto first = program_of(*cache, full_call({4}, 1.0));
  // The scalar's value is a runtime argument, not part of the signature.
  auto again = program_of(*cache, full_call({4}, 2.5));
  auto other = program_of(*cache, full_call({5}, 1.0));
  EXPECT_EQ(first.get(), again.get());
  EXPECT_NE(first.get(), other.get());
  EXPECT_EQ(first->label, "test::full");
  const auto s = cache->stats();
  EXPECT_EQ(s.signature_misses, 2);
  EXPECT_EQ(s.signature_hits, 1);
}

TEST(ProgramCache, ExecutableCompiledOnceRunsWithCachedScalars) {
  auto cache = new_cache();
  const OpCall call = full_call({3}, 1.5);
  auto program = program_of(*cache, call);
  auto exe = cache->executable_of(*program);
  EXPECT_EQ(exe.get(), cache->executable_of(*program).get());
  EXPECT_EQ(cache->executables().stats().compiles, 1);

  ASSERT_EQ(program->plan.args.size(), 1u);
  auto scalar = cache->scalar(0, exec::runtime_value(call, program->plan.args[0]));
  auto result = exe->execute({scalar->raw()}, testing::cpu_client().devices()[0].raw, {});
  if (result.done) result.done->await();
  ASSERT_EQ(result.outputs.size(), 1u);
  EXPECT_EQ(to_floats(*result.outputs[0], 3), std::vector<float>(3, 1.5f));
  cache->count_execution();
  EXPECT_EQ(cache->stats().executions, 1);
}

TEST(ProgramCache, WholeProgramsGoThroughTheCompilationCache) {
  auto cache = new_cache();
  auto a = cache->compile(testing::kAddProgram, "an add");
  auto b = cache->compile(testing::kAddProgram, "the same add under another name");
  EXPECT_EQ(a.get(), b.get());
  const auto s = cache->executables().stats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.hits, 1);
}

TEST(ProgramCache, ACompileErrorNamesTheProgram) {
  auto cache = new_cache();
  try {
    cache->compile("module @m { this is not StableHLO }", "a broken test program");
    FAIL() << "compiling garbage should throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("a broken test program"), std::string::npos) << e.what();
  }
}

TEST(ProgramCache, GraphProgramsAreFoundByFingerprintAndClearedWithTheRest) {
  auto cache = new_cache();
  const cache::Fingerprint fp = cache::fingerprint("a graph key");
  EXPECT_EQ(cache->find_graph(fp), nullptr);
  auto graph = std::make_shared<exec::GraphProgram>();
  graph->exe = cache->compile(testing::kAddProgram, "a graph");
  cache->add_graph(fp, graph);
  EXPECT_EQ(cache->find_graph(fp).get(), graph.get());
  EXPECT_EQ(cache->find_graph(cache::fingerprint("another key")), nullptr);

  program_of(*cache, full_call({2}, 0.0));
  cache->clear(false);
  EXPECT_EQ(cache->find_graph(fp), nullptr);
  program_of(*cache, full_call({2}, 0.0));
  EXPECT_EQ(cache->stats().signature_misses, 2);  // built again after clear
}

TEST(ProgramCache, OpProgramsAreBounded) {
  auto cache = new_cache(/*max_op_programs=*/2);
  auto a = program_of(*cache, full_call({1}, 0.0));
  program_of(*cache, full_call({2}, 0.0));
  program_of(*cache, full_call({3}, 0.0));  // over the bound: the table starts again
  auto a_again = program_of(*cache, full_call({1}, 0.0));
  EXPECT_NE(a.get(), a_again.get());
  EXPECT_EQ(cache->stats().signature_misses, 4);
}

TEST(ScalarCache, CacheableValuesTransferOnceOthersEveryTime) {
  auto cache = new_cache();
  const auto v = exec::ScalarValue::floating(ElementType::kF32, 0.25);
  auto b1 = cache->scalar(0, v);
  auto b2 = cache->scalar(0, v);
  EXPECT_EQ(b1.get(), b2.get());
  EXPECT_NE(cache->scalar(1, v).get(), b1.get());  // per device
  EXPECT_NE(cache->scalar(0, exec::ScalarValue::floating(ElementType::kF32, 0.5)).get(), b1.get());
  auto seed = exec::ScalarValue::integral(ElementType::kI64, 7);
  seed.cacheable = false;  // e.g. an RNG offset
  EXPECT_NE(cache->scalar(0, seed).get(), cache->scalar(0, seed).get());
  EXPECT_EQ(to_floats(*b1, 1), std::vector<float>{0.25f});
  cache->scalars().clear();
  EXPECT_NE(cache->scalar(0, v).get(), b1.get());
}

// A storage on device 0 holding `n` floats.
std::unique_ptr<runtime::DeviceStorage> storage_of(int64_t n) {
  std::vector<float> values(n, 1.0f);
  auto t = testing::cpu_client().buffer_from_host(values.data(), ElementType::kF32, {n}, 0,
                                                  pjrt::HostBufferSemantics::kCopyDuringCall);
  auto s = std::make_unique<runtime::DeviceStorage>(0, n * sizeof(float));
  s->set_contents(std::shared_ptr<pjrt::Buffer>(std::move(t.buffer)), {ElementType::kF32, {n}}, "test");
  return s;
}

// copy(x) of a whole f32[n] storage.
OpCall copy_call(runtime::DeviceStorage& s, int64_t n) {
  OpCall call;
  call.op = "copy";
  call.label = "test::copy";
  call.attrs.set_ints("shape", {n});
  call.inputs.push_back(exec::Input::tensor(&s, exec::View{ElementType::kF32, {n}, {1}, 0}, ElementType::kF32));
  call.outputs.push_back(std::nullopt);
  return call;
}

TEST(ShapeChurn, WarnsOnceWhenOneCallPatternExceedsTheLimit) {
  auto cache = new_cache();
  std::vector<std::string> warnings;
  exec::ShapeChurn::set_sink([&](const std::string& m) { warnings.push_back(m); });
  cache->churn().set_limit(2);
  std::vector<std::unique_ptr<runtime::DeviceStorage>> storages;
  for (int64_t n : {3, 4, 5, 6, 3}) {
    storages.push_back(storage_of(n));
    program_of(*cache, copy_call(*storages.back(), n));
  }
  exec::ShapeChurn::set_sink([](const std::string&) {});
  ASSERT_EQ(warnings.size(), 1u);  // at the third distinct shape, and only once
  EXPECT_NE(warnings[0].find("test::copy (float32[rank 1])"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("3 distinct shapes"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("[5]"), std::string::npos) << warnings[0];
  // The repeated shape [3] was a hit, not a compile.
  EXPECT_EQ(cache->stats().signature_hits, 1);
}

TEST(ShapeChurn, LimitZeroNeverWarns) {
  auto cache = new_cache();
  int warnings = 0;
  exec::ShapeChurn::set_sink([&](const std::string&) { ++warnings; });
  cache->churn().set_limit(0);
  std::vector<std::unique_ptr<runtime::DeviceStorage>> storages;
  for (int64_t n = 1; n <= 5; ++n) {
    storages.push_back(storage_of(n));
    program_of(*cache, copy_call(*storages.back(), n));
  }
  exec::ShapeChurn::set_sink([](const std::string&) {});
  EXPECT_EQ(warnings, 0);
}

}  // namespace
}  // namespace tpu
