// The hand-written CompileOptionsProto encoder, checked against protoc.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "exec/compile_settings.h"
#include "pjrt/compile_options.h"
#include "pjrt/proto_writer.h"
#include "test_support.h"

namespace tpu {
namespace {

std::string decode(const std::string& bytes, const std::string& how) {
  // A file per call: CTest runs the tests of this binary in parallel processes.
  std::string path = ::testing::TempDir() + "/compile_options_XXXXXX";
  const int fd = ::mkstemp(path.data());
  EXPECT_GE(fd, 0);
  ::close(fd);
  std::ofstream(path, std::ios::binary) << bytes;
  int status = 0;
  std::string out = testing::run_command(
      "protoc " + how + " < " + path + " 2>&1", &status);
  EXPECT_EQ(status, 0) << out;
  std::remove(path.c_str());
  return out;
}

std::string decode_typed(const std::string& bytes) {
  return decode(bytes, std::string("--proto_path=") + TPU_TEST_PROTO_DIR +
                           " --decode=xla.CompileOptionsProto compile_options_subset.proto");
}

TEST(ProtoWriter, VarintsMatchTheWireFormat) {
  pjrt::ProtoWriter w;
  w.int64_field(1, 150);
  EXPECT_EQ(w.bytes(), std::string("\x08\x96\x01", 3));
  pjrt::ProtoWriter neg;
  neg.int64_field(2, -1);  // ten bytes of two's complement
  EXPECT_EQ(neg.bytes().size(), 11u);
  EXPECT_EQ(decode(neg.bytes(), "--decode_raw"), "2: 18446744073709551615\n");
}

TEST(CompileOptions, DefaultsDecodeWithProtoc) {
  const std::string bytes = pjrt::serialize(pjrt::CompileOptions{});
  EXPECT_EQ(decode_typed(bytes),
            "executable_build_options {\n"
            "  device_ordinal: -1\n"
            "  num_replicas: 1\n"
            "  num_partitions: 1\n"
            "}\n"
            "compile_portable_executable: true\n");
}

TEST(CompileOptions, FieldNumbersAreXlas) {
  pjrt::CompileOptions o;
  o.num_replicas = 4;
  o.num_partitions = 2;
  o.portable = false;
  EXPECT_EQ(decode(pjrt::serialize(o), "--decode_raw"),
            "3 {\n"
            "  1: 18446744073709551615\n"
            "  4: 4\n"
            "  5: 2\n"
            "}\n");
}

TEST(CompileOptions, ReplicatedProgramsCarryTheirDeviceAssignment) {
  const std::string text = decode_typed(pjrt::serialize(pjrt::replicated_over({3, 1})));
  EXPECT_EQ(text,
            "executable_build_options {\n"
            "  device_ordinal: -1\n"
            "  num_replicas: 2\n"
            "  num_partitions: 1\n"
            "  device_assignment {\n"
            "    replica_count: 2\n"
            "    computation_count: 1\n"
            "    computation_devices {\n"
            "      replica_device_ids: 3\n"
            "      replica_device_ids: 1\n"
            "    }\n"
            "  }\n"
            "}\n");
}

TEST(CompileOptions, EnvOptionOverridesAreMapEntries) {
  pjrt::CompileOptions o;
  o.env_option_overrides.emplace_back("xla_flag_a", std::string("text"));
  o.env_option_overrides.emplace_back("xla_flag_b", true);
  o.env_option_overrides.emplace_back("xla_flag_c", int64_t{7});
  o.env_option_overrides.emplace_back("xla_flag_d", 0.5);
  const std::string text = decode_typed(pjrt::serialize(o));
  EXPECT_NE(text.find("key: \"xla_flag_a\"\n  value {\n    string_field: \"text\""), std::string::npos) << text;
  EXPECT_NE(text.find("bool_field: true"), std::string::npos) << text;
  EXPECT_NE(text.find("int_field: 7"), std::string::npos) << text;
  EXPECT_NE(text.find("double_field: 0.5"), std::string::npos) << text;
}

TEST(CompileOptions, EffortLevelsAreBuildOptions) {
  pjrt::CompileOptions o;
  o.optimization_level = 19;
  o.memory_fitting_level = 39;
  const std::string text = decode_typed(pjrt::serialize(o));
  EXPECT_NE(text.find("optimization_level: EFFORT_O1"), std::string::npos) << text;
  EXPECT_NE(text.find("memory_fitting_level: EFFORT_O3"), std::string::npos) << text;
}

TEST(CompileSettings, NestedOptionsMergeInnerWinsAndKeyThePrograms) {
  EXPECT_EQ(exec::settings_key(), "");
  exec::push_compiler_options({{"xla_optimization_level", std::string("O1")}, {"xla_flag_a", true}});
  const std::string outer = exec::settings_key();
  exec::push_compiler_options({{"xla_optimization_level", std::string("O3")}});
  EXPECT_NE(exec::settings_key(), outer);
  pjrt::CompileOptions o;
  exec::apply_compile_settings(o);
  EXPECT_EQ(o.optimization_level, 39);
  ASSERT_EQ(o.env_option_overrides.size(), 1u);  // the level is a build option, not an override
  EXPECT_EQ(o.env_option_overrides[0].first, "xla_flag_a");
  exec::pop_compiler_options();
  EXPECT_EQ(exec::settings_key(), outer);
  exec::pop_compiler_options();
  EXPECT_EQ(exec::settings_key(), "");
  EXPECT_THROW(exec::push_compiler_options({{"xla_memory_fitting_level", std::string("fast")}}),
               std::invalid_argument);
  EXPECT_EQ(exec::settings_key(), "");  // a rejected entry is not pushed
}

}  // namespace
}  // namespace tpu
