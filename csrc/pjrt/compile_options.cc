#include "pjrt/compile_options.h"

#include "pjrt/proto_writer.h"

namespace tpu::pjrt {

std::string serialize(const CompileOptions& options) {
  ProtoWriter build;
  build.int64_field(1, options.device_ordinal);
  build.int64_field(4, options.num_replicas);
  build.int64_field(5, options.num_partitions);
  if (!options.replica_devices.empty()) {
    ProtoWriter replicas;
    for (int64_t id : options.replica_devices) replicas.int64_field(1, id);
    ProtoWriter assignment;
    assignment.int64_field(1, static_cast<int64_t>(options.replica_devices.size()));
    assignment.int64_field(2, 1);
    assignment.message_field(3, replicas);
    build.message_field(9, assignment);
  }
  if (options.optimization_level != 0) build.int64_field(24, options.optimization_level);
  if (options.memory_fitting_level != 0) build.int64_field(25, options.memory_fitting_level);

  ProtoWriter proto;
  proto.message_field(3, build);
  if (options.portable) proto.bool_field(4, true);
  for (const auto& [key, value] : options.env_option_overrides) {
    ProtoWriter override_value;
    if (auto* s = std::get_if<std::string>(&value)) override_value.bytes_field(1, *s);
    if (auto* b = std::get_if<bool>(&value)) override_value.bool_field(2, *b);
    if (auto* i = std::get_if<int64_t>(&value)) override_value.int64_field(3, *i);
    if (auto* d = std::get_if<double>(&value)) override_value.double_field(4, *d);
    ProtoWriter entry;  // map entries are messages {key = 1, value = 2}
    entry.bytes_field(1, key);
    entry.message_field(2, override_value);
    proto.message_field(7, entry);
  }
  return proto.bytes();
}

CompileOptions replicated_over(std::vector<int64_t> devices) {
  CompileOptions o;
  o.num_replicas = static_cast<int64_t>(devices.size());
  o.portable = false;
  o.replica_devices = std::move(devices);
  return o;
}

}  // namespace tpu::pjrt
