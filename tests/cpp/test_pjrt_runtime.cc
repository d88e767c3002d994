// The PJRT layer against the real XLA CPU plugin: loading, errors, compile, execute, donation,
// transfers, serialization.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <future>

#include "pjrt/compile_options.h"
#include "pjrt/error.h"
#include "pjrt/plugin.h"
#include "test_support.h"

namespace tpu {
namespace {

using testing::HostArray;

const char* kAdd = testing::kAddProgram;

TEST(Plugin, LoadsTheCpuPluginAndChecksItsVersion) {
  auto plugin = testing::cpu_plugin();
  EXPECT_EQ(plugin->api_major(), PJRT_API_MAJOR);
  EXPECT_TRUE(pjrt::Plugin::missing_functions(plugin->api()).empty());
  bool has_xla_version = false;
  for (const auto& a : plugin->attributes()) has_xla_version |= a.name == "xla_version";
  EXPECT_TRUE(has_xla_version);
}

void expect_plugin_error(const std::string& path, const std::string& reason) {
  try {
    pjrt::Plugin::load(path);
    FAIL() << "loading " << path << " should fail";
  } catch (const pjrt::PluginError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(reason), std::string::npos) << msg;
    EXPECT_NE(msg.find("Fix:"), std::string::npos) << msg;
  }
}

TEST(Plugin, MissingFileIsAClearError) {
  expect_plugin_error("/nonexistent/libtpu.so", "does not exist");
}

TEST(Plugin, LibraryWithoutGetPjrtApiIsRefused) {
  expect_plugin_error("/lib/x86_64-linux-gnu/libz.so.1", "not a PJRT plugin");
}

TEST(Plugin, NonLibraryFileIsRefused) {
  expect_plugin_error(std::string(TPU_TEST_PROTO_DIR) + "/compile_options_subset.proto",
                      "dlopen failed");
}

TEST(Plugin, ShortFunctionTableIsReported) {
  PJRT_Api fake = *testing::cpu_plugin()->api();
  fake.struct_size = offsetof(PJRT_Api, PJRT_Client_Create);  // an "old" plugin
  auto missing = pjrt::Plugin::missing_functions(&fake);
  ASSERT_FALSE(missing.empty());
  EXPECT_EQ(missing.front(), "PJRT_Client_Create");
}

TEST(Client, EnumeratesDevices) {
  const auto& client = testing::cpu_client();
  EXPECT_EQ(client.platform_name(), "cpu");
  ASSERT_EQ(client.devices().size(), 2u);
  EXPECT_EQ(client.devices()[0].kind, "cpu");
  EXPECT_NE(client.devices()[0].raw, client.devices()[1].raw);
}

TEST(Client, CompilesAndExecutesOnEitherDevice) {
  for (int device : {0, 1}) {
    auto out = testing::run_program(
        kAdd,
        {HostArray::of<float>(ElementType::kF32, {4}, {1, 2, 3, 4}),
         HostArray::of<float>(ElementType::kF32, {4}, {10, 20, 30, 40})},
        device);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].values<float>(), (std::vector<float>{11, 22, 33, 44}));
  }
}

TEST(Client, CompileErrorCarriesThePluginMessage) {
  const auto& client = testing::cpu_client();
  try {
    client.compile("module { this is not mlir }", pjrt::serialize(pjrt::CompileOptions{}));
    FAIL() << "compiling garbage should fail";
  } catch (const pjrt::PjrtError& e) {
    EXPECT_NE(std::string(e.what()).find("PJRT_Client_Compile"), std::string::npos) << e.what();
  }
}

TEST(Buffer, RoundTripsAndReportsMetadata) {
  const auto& client = testing::cpu_client();
  std::vector<int32_t> host{1, -2, 3, -4, 5, -6};
  auto t = client.buffer_from_host(host.data(), ElementType::kI32, {2, 3}, 1,
                                   pjrt::HostBufferSemantics::kCopyDuringCall);
  EXPECT_EQ(t.buffer->element_type(), ElementType::kI32);
  EXPECT_EQ(t.buffer->dims(), (hlo::Dims{2, 3}));
  std::vector<int32_t> back(6);
  t.buffer->to_host(back.data(), back.size() * 4);
  EXPECT_EQ(back, host);
  auto copy = t.buffer->copy_to_device(client.devices()[0].raw);
  std::vector<int32_t> back2(6);
  copy->to_host(back2.data(), back2.size() * 4);
  EXPECT_EQ(back2, host);
}

TEST(Buffer, ReadingAReleasedBufferThrows) {
  const auto& client = testing::cpu_client();
  float x = 1;
  auto t = client.buffer_from_host(&x, ElementType::kF32, {}, 0,
                                   pjrt::HostBufferSemantics::kCopyDuringCall);
  t.buffer->release_memory();
  EXPECT_TRUE(t.buffer->is_deleted());
  float y = 0;
  EXPECT_THROW(t.buffer->to_host(&y, 4), pjrt::PjrtError);
}

TEST(Executable, DonatedInputIsConsumedUnlessMarkedNonDonatable) {
  const char* kInc = R"(
module @m {
  func.func public @main(%a: tensor<3xf32> {tf.aliasing_output = 0 : i32}) -> (tensor<3xf32>) {
    %one = "stablehlo.constant"() {value = dense<1.0> : tensor<3xf32>} : () -> tensor<3xf32>
    %0 = "stablehlo.add"(%a, %one) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    "func.return"(%0) : (tensor<3xf32>) -> ()
  }
})";
  const auto& client = testing::cpu_client();
  auto exe = client.compile(kInc, pjrt::serialize(pjrt::CompileOptions{}));
  std::vector<float> host{1, 2, 3};
  for (bool donate : {true, false}) {
    auto in = client.buffer_from_host(host.data(), ElementType::kF32, {3}, 0,
                                      pjrt::HostBufferSemantics::kCopyDuringCall);
    std::vector<int64_t> keep;
    if (!donate) keep.push_back(0);
    auto result = exe->execute({in.buffer->raw()}, client.devices()[0].raw, keep);
    ASSERT_TRUE(result.done);
    result.done->await();
    std::vector<float> out(3);
    result.outputs[0]->to_host(out.data(), 12);
    EXPECT_EQ(out, (std::vector<float>{2, 3, 4}));
    EXPECT_EQ(in.buffer->is_deleted(), donate);
  }
}

TEST(Executable, SerializesAndDeserializes) {
  const auto& client = testing::cpu_client();
  auto exe = client.compile(kAdd, pjrt::serialize(pjrt::CompileOptions{}));
  const std::string bytes = exe->serialize();
  ASSERT_FALSE(bytes.empty());
  auto again = client.deserialize(bytes);
  std::vector<float> a{1, 2, 3, 4};
  auto ba = client.buffer_from_host(a.data(), ElementType::kF32, {4}, 0,
                                    pjrt::HostBufferSemantics::kCopyDuringCall);
  auto result = again->execute({ba.buffer->raw(), ba.buffer->raw()}, client.devices()[0].raw, {});
  std::vector<float> out(4);
  result.outputs[0]->to_host(out.data(), 16);
  EXPECT_EQ(out, (std::vector<float>{2, 4, 6, 8}));
}

TEST(Event, OnReadyFiresAfterCompletion) {
  const auto& client = testing::cpu_client();
  auto exe = client.compile(kAdd, pjrt::serialize(pjrt::CompileOptions{}));
  std::vector<float> a{1, 2, 3, 4};
  auto ba = client.buffer_from_host(a.data(), ElementType::kF32, {4}, 0,
                                    pjrt::HostBufferSemantics::kCopyDuringCall);
  auto result = exe->execute({ba.buffer->raw(), ba.buffer->raw()}, client.devices()[0].raw, {});
  std::promise<bool> fired;
  result.done->on_ready([&](const pjrt::ErrorInfo* err) { fired.set_value(err == nullptr); });
  EXPECT_TRUE(fired.get_future().get());
  EXPECT_TRUE(result.done->is_ready());
  EXPECT_FALSE(result.done->error().has_value());
}

}  // namespace
}  // namespace tpu
