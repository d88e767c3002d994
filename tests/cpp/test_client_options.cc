// PJRT_Client_Create options per plugin kind, built from a fake environment (no GPU needed).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <vector>
#include <string>

#include "runtime/client_options.h"
#include "runtime/host_pages.h"

namespace tpu::runtime {
namespace {

using Kind = pjrt::NamedOption::Kind;

EnvLookup fake_env(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return (it == held->end() || it->second.empty()) ? nullptr : it->second.c_str();
  };
}

const pjrt::NamedOption* find(const std::vector<pjrt::NamedOption>& options, const std::string& name) {
  for (const auto& o : options) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

std::string error_of(PluginKind kind, std::map<std::string, std::string> vars) {
  try {
    client_create_options(kind, fake_env(std::move(vars)), 0, 1);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(PluginKind, FromFileNameWhenNoPlatformIsSet) {
  auto env = fake_env({});
  EXPECT_EQ(plugin_kind("/x/fastatomstruct_xla_cpu/libpjrt_cpu.so", env), PluginKind::kXlaCpu);
  EXPECT_EQ(plugin_kind("/x/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so", env), PluginKind::kXlaCpu);
  EXPECT_EQ(plugin_kind("/x/jax_plugins/xla_cuda13/xla_cuda_plugin.so", env), PluginKind::kXlaGpu);
  EXPECT_EQ(plugin_kind("/x/xla_plugins/xla_cuda12_pjrt/xla_gpu_pjrt.so", env), PluginKind::kXlaGpu);
  EXPECT_EQ(plugin_kind("/x/libtpu/libtpu.so", env), PluginKind::kOther);
  // Only the file name counts, not the directories above it.
  EXPECT_EQ(plugin_kind("/cpu/gpu/libtpu.so", env), PluginKind::kOther);
}

TEST(PluginKind, PlatformVariableWins) {
  EXPECT_EQ(plugin_kind("/x/plugin.so", fake_env({{"TORCH_TPU_PLATFORM", "CUDA"}})), PluginKind::kXlaGpu);
  EXPECT_EQ(plugin_kind("/x/plugin.so", fake_env({{"TORCH_TPU_PLATFORM", "gpu"}})), PluginKind::kXlaGpu);
  EXPECT_EQ(plugin_kind("/x/xla_gpu.so", fake_env({{"TORCH_TPU_PLATFORM", "tpu"}})), PluginKind::kOther);
  EXPECT_EQ(plugin_kind("/x/plugin.so", fake_env({{"TORCH_TPU_PLATFORM", "cpu"}})), PluginKind::kXlaCpu);
  try {
    plugin_kind("/x/plugin.so", fake_env({{"TORCH_TPU_PLATFORM", "metal"}}));
    FAIL() << "no error for an unknown platform";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("TORCH_TPU_PLATFORM='metal'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cpu, cuda or tpu"), std::string::npos);
  }
}

TEST(ClientOptions, CpuGetsDeviceCountAndNoGpuOrNodeOptions) {
  auto opts = client_create_options(
      PluginKind::kXlaCpu,
      fake_env({{"TORCH_TPU_CPU_DEVICE_COUNT", "4"}, {"TORCH_TPU_GPU_PREALLOCATE", "1"},
                {"TORCH_TPU_VISIBLE_DEVICES", "0"}}),
      1, 2);
  ASSERT_EQ(opts.size(), 2u);
  ASSERT_NE(find(opts, "cpu_device_count"), nullptr);
  EXPECT_EQ(find(opts, "cpu_device_count")->int_value, 4);
  EXPECT_TRUE(find(opts, "asynchronous")->bool_value);
}

TEST(ClientOptions, GpuDefaultsToNoPreallocation) {
  auto opts = client_create_options(PluginKind::kXlaGpu, fake_env({}), 0, 1);
  ASSERT_EQ(opts.size(), 1u);
  EXPECT_EQ(opts[0].name, "preallocate");
  EXPECT_EQ(opts[0].kind, Kind::kBool);
  EXPECT_FALSE(opts[0].bool_value);
  EXPECT_EQ(find(opts, "cpu_device_count"), nullptr);
}

TEST(ClientOptions, GpuSettingsBecomeTypedOptions) {
  auto opts = client_create_options(
      PluginKind::kXlaGpu,
      fake_env({{"TORCH_TPU_GPU_PREALLOCATE", "true"}, {"TORCH_TPU_GPU_MEMORY_FRACTION", "0.5"},
                {"TORCH_TPU_GPU_ALLOCATOR", "CUDA_ASYNC"}, {"TORCH_TPU_VISIBLE_DEVICES", "2,0"}}),
      1, 4);
  ASSERT_NE(find(opts, "preallocate"), nullptr);
  EXPECT_TRUE(find(opts, "preallocate")->bool_value);
  ASSERT_NE(find(opts, "memory_fraction"), nullptr);
  EXPECT_EQ(find(opts, "memory_fraction")->kind, Kind::kFloat);
  EXPECT_FLOAT_EQ(find(opts, "memory_fraction")->float_value, 0.5f);
  ASSERT_NE(find(opts, "allocator"), nullptr);
  EXPECT_EQ(find(opts, "allocator")->kind, Kind::kString);
  EXPECT_EQ(find(opts, "allocator")->string_value, "cuda_async");
  ASSERT_NE(find(opts, "visible_devices"), nullptr);
  EXPECT_EQ(find(opts, "visible_devices")->kind, Kind::kInt64List);
  EXPECT_EQ(find(opts, "visible_devices")->int_list, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(find(opts, "node_id")->int_value, 1);
  EXPECT_EQ(find(opts, "num_nodes")->int_value, 4);
}

TEST(ClientOptions, OtherPluginsGetOnlyNodeOptions) {
  auto env = fake_env({{"TORCH_TPU_GPU_PREALLOCATE", "1"}, {"TORCH_TPU_CPU_DEVICE_COUNT", "2"}});
  EXPECT_TRUE(client_create_options(PluginKind::kOther, env, 0, 1).empty());
  auto opts = client_create_options(PluginKind::kOther, env, 0, 2);
  ASSERT_EQ(opts.size(), 2u);
  EXPECT_EQ(find(opts, "num_nodes")->int_value, 2);
}

TEST(ClientOptions, MalformedGpuSettingsNameTheVariable) {
  for (const char* bad : {"0", "1.5", "-0.1", "half", "0.5x"}) {
    std::string e = error_of(PluginKind::kXlaGpu, {{"TORCH_TPU_GPU_MEMORY_FRACTION", bad}});
    EXPECT_NE(e.find("TORCH_TPU_GPU_MEMORY_FRACTION"), std::string::npos) << bad;
    EXPECT_NE(e.find("(0, 1]"), std::string::npos) << bad;
  }
  EXPECT_NE(error_of(PluginKind::kXlaGpu, {{"TORCH_TPU_GPU_PREALLOCATE", "maybe"}})
                .find("TORCH_TPU_GPU_PREALLOCATE='maybe'"),
            std::string::npos);
  EXPECT_NE(error_of(PluginKind::kXlaGpu, {{"TORCH_TPU_GPU_ALLOCATOR", "tlsf"}})
                .find("default, platform, bfc, cuda_async"),
            std::string::npos);
  for (const char* bad : {"a", "0,,1", "1,1", "-1", "0,"}) {
    EXPECT_NE(error_of(PluginKind::kXlaGpu, {{"TORCH_TPU_VISIBLE_DEVICES", bad}})
                  .find("TORCH_TPU_VISIBLE_DEVICES"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(error_of(PluginKind::kXlaCpu, {{"TORCH_TPU_CPU_DEVICE_COUNT", "0"}})
                .find("TORCH_TPU_CPU_DEVICE_COUNT='0'"),
            std::string::npos);
}

TEST(HostPages, KeptWithTheCpuPluginUnlessReleased) {
  EXPECT_FALSE(apply_host_pages_policy(PluginKind::kXlaGpu, fake_env({})));
  EXPECT_FALSE(apply_host_pages_policy(PluginKind::kXlaCpu, fake_env({{"TORCH_TPU_HOST_PAGES", "release"}})));
  try {
    apply_host_pages_policy(PluginKind::kXlaCpu, fake_env({{"TORCH_TPU_HOST_PAGES", "sometimes"}}));
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("TORCH_TPU_HOST_PAGES='sometimes' is not one of keep, keep-arenas, release"),
              std::string::npos) << e.what();
  }
  // Last: keeping pages changes this process's allocator for the tests after it (harmlessly).
  EXPECT_TRUE(apply_host_pages_policy(PluginKind::kXlaCpu, fake_env({{"TORCH_TPU_HOST_PAGES", "keep-arenas"}})));
  EXPECT_TRUE(apply_host_pages_policy(PluginKind::kXlaCpu, fake_env({})));
}

}  // namespace
}  // namespace tpu::runtime
