// xla.CompileOptionsProto, serialized by hand for PJRT_Client_Compile.
//
// An empty proto compiles for 0 replicas and 0 partitions, so the build options are always
// written. Field numbers (from xla/pjrt/proto/compile_options.proto):
//   CompileOptionsProto:          executable_build_options = 3, compile_portable_executable = 4,
//                                 env_option_overrides = 7 (map<string, OptionOverrideProto>)
//   ExecutableBuildOptionsProto:  device_ordinal = 1, num_replicas = 4, num_partitions = 5
//   OptionOverrideProto:          string_field = 1, bool_field = 2, int_field = 3, double_field = 4
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tpu::pjrt {

struct CompileOptions {
  int64_t device_ordinal = -1;  // -1: not bound to one device
  int64_t num_replicas = 1;
  int64_t num_partitions = 1;
  // A portable executable runs on any addressable device, chosen at execute time.
  bool portable = true;
  using Override = std::variant<std::string, bool, int64_t, double>;
  std::vector<std::pair<std::string, Override>> env_option_overrides;
};

std::string serialize(const CompileOptions& options);

}  // namespace tpu::pjrt
