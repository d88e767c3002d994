// xla.CompileOptionsProto, serialized by hand for PJRT_Client_Compile.
//
// An empty proto compiles for 0 replicas and 0 partitions, so the build options are always
// written. Field numbers (from xla/pjrt/proto/compile_options.proto):
//   CompileOptionsProto:          executable_build_options = 3, compile_portable_executable = 4,
//                                 env_option_overrides = 7 (map<string, OptionOverrideProto>)
//   ExecutableBuildOptionsProto:  device_ordinal = 1, num_replicas = 4, num_partitions = 5,
//                                 device_assignment = 9
//   DeviceAssignmentProto:        replica_count = 1, computation_count = 2,
//                                 computation_devices = 3 (ComputationDevice {replica_device_ids = 1})
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
  // Collective programs: one replica per listed global device id (replica i runs on
  // replica_devices[i]). When set, num_replicas is its size and the executable is not portable.
  std::vector<int64_t> replica_devices;
  using Override = std::variant<std::string, bool, int64_t, double>;
  std::vector<std::pair<std::string, Override>> env_option_overrides;
  // XLA's effort levels (ExecutionOptions.EffortLevel: O0 = 9, O1 = 19, O2 = 29, O3 = 39);
  // 0 leaves the plugin's default.
  int64_t optimization_level = 0;
  int64_t memory_fitting_level = 0;
};

std::string serialize(const CompileOptions& options);

// Options for a program run once on each of `devices` (global device ids), one replica each.
CompileOptions replicated_over(std::vector<int64_t> devices);

}  // namespace tpu::pjrt
