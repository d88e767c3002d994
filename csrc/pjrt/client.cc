#include "pjrt/client.h"

#include "pjrt/buffer_type.h"
#include "pjrt/error.h"
#include "pjrt/stderr_filter.h"

namespace tpu::pjrt {

std::unique_ptr<Client> Client::create(std::shared_ptr<Plugin> plugin,
                                       const std::vector<NamedOption>& options,
                                       std::shared_ptr<KeyValueStore> kv) {
  const PJRT_Api* api = plugin->api();
  std::vector<PJRT_NamedValue> values(options.size());
  for (size_t i = 0; i < options.size(); ++i) {
    const NamedOption& o = options[i];
    PJRT_NamedValue& v = values[i];
    v = PJRT_NamedValue{};
    v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    v.name = o.name.c_str();
    v.name_size = o.name.size();
    v.value_size = 1;
    switch (o.kind) {
      case NamedOption::Kind::kInt64: v.type = PJRT_NamedValue_kInt64; v.int64_value = o.int_value; break;
      case NamedOption::Kind::kBool: v.type = PJRT_NamedValue_kBool; v.bool_value = o.bool_value; break;
      case NamedOption::Kind::kFloat: v.type = PJRT_NamedValue_kFloat; v.float_value = o.float_value; break;
      case NamedOption::Kind::kString:
        v.type = PJRT_NamedValue_kString;
        v.string_value = o.string_value.c_str();
        v.value_size = o.string_value.size();
        break;
      case NamedOption::Kind::kInt64List:
        v.type = PJRT_NamedValue_kInt64List;
        v.int64_array_value = o.int_list.data();
        v.value_size = o.int_list.size();
        break;
    }
  }
  PJRT_Client_Create_Args args{};
  args.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  args.create_options = values.data();
  args.num_options = values.size();
  connect_key_value_store(args, kv.get());
  check(api, api->PJRT_Client_Create(&args), "PJRT_Client_Create");

  std::unique_ptr<Client> client(new Client());
  client->plugin_ = std::move(plugin);
  client->kv_ = std::move(kv);
  client->client_ = args.client;

  PJRT_Client_PlatformName_Args name{};
  name.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  name.client = client->client_;
  check(api, api->PJRT_Client_PlatformName(&name), "PJRT_Client_PlatformName");
  client->platform_name_.assign(name.platform_name, name.platform_name_size);

  PJRT_Client_PlatformVersion_Args version{};
  version.struct_size = PJRT_Client_PlatformVersion_Args_STRUCT_SIZE;
  version.client = client->client_;
  check(api, api->PJRT_Client_PlatformVersion(&version), "PJRT_Client_PlatformVersion");
  client->platform_version_.assign(version.platform_version, version.platform_version_size);

  PJRT_Client_AddressableDevices_Args devs{};
  devs.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  devs.client = client->client_;
  check(api, api->PJRT_Client_AddressableDevices(&devs), "PJRT_Client_AddressableDevices");
  for (size_t i = 0; i < devs.num_addressable_devices; ++i) {
    DeviceInfo info;
    info.raw = devs.addressable_devices[i];
    PJRT_Device_GetDescription_Args desc{};
    desc.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
    desc.device = info.raw;
    check(api, api->PJRT_Device_GetDescription(&desc), "PJRT_Device_GetDescription");
    PJRT_DeviceDescription_Id_Args id{};
    id.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
    id.device_description = desc.device_description;
    check(api, api->PJRT_DeviceDescription_Id(&id), "PJRT_DeviceDescription_Id");
    info.id = id.id;
    PJRT_DeviceDescription_Kind_Args kind{};
    kind.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
    kind.device_description = desc.device_description;
    check(api, api->PJRT_DeviceDescription_Kind(&kind), "PJRT_DeviceDescription_Kind");
    info.kind.assign(kind.device_kind, kind.device_kind_size);
    PJRT_DeviceDescription_DebugString_Args dbg{};
    dbg.struct_size = PJRT_DeviceDescription_DebugString_Args_STRUCT_SIZE;
    dbg.device_description = desc.device_description;
    check(api, api->PJRT_DeviceDescription_DebugString(&dbg), "PJRT_DeviceDescription_DebugString");
    info.debug_string.assign(dbg.debug_string, dbg.debug_string_size);
    PJRT_DeviceDescription_Attributes_Args attrs{};
    attrs.struct_size = PJRT_DeviceDescription_Attributes_Args_STRUCT_SIZE;
    attrs.device_description = desc.device_description;
    check(api, api->PJRT_DeviceDescription_Attributes(&attrs), "PJRT_DeviceDescription_Attributes");
    for (size_t a = 0; a < attrs.num_attributes; ++a) {
      const PJRT_NamedValue& v = attrs.attributes[a];
      std::string name(v.name, v.name_size);
      if (v.type == PJRT_NamedValue_kInt64) {
        info.int_attributes[name] = {v.int64_value};
      } else if (v.type == PJRT_NamedValue_kInt64List) {
        info.int_attributes[name].assign(v.int64_array_value, v.int64_array_value + v.value_size);
      }
    }
    client->devices_.push_back(std::move(info));
  }
  return client;
}

Client::~Client() {
  if (client_ == nullptr) return;
  PJRT_Client_Destroy_Args args{};
  args.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
  args.client = client_;
  if (PJRT_Error* err = api()->PJRT_Client_Destroy(&args)) consume_error(api(), err);
}

std::unique_ptr<LoadedExecutable> Client::compile(const std::string& mlir,
                                                  const std::string& compile_options) const {
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = const_cast<char*>(mlir.data());
  program.code_size = mlir.size();
  static const char kFormat[] = "mlir";
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;

  PJRT_Client_Compile_Args args{};
  args.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  args.client = client_;
  args.program = &program;
  args.compile_options = compile_options.data();
  args.compile_options_size = compile_options.size();
  check(api(), api()->PJRT_Client_Compile(&args), "PJRT_Client_Compile");
  return std::make_unique<LoadedExecutable>(api(), args.executable);
}

std::unique_ptr<LoadedExecutable> Client::deserialize(const std::string& bytes) const {
  PJRT_Executable_DeserializeAndLoad_Args args{};
  args.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
  args.client = client_;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  PJRT_Error* error = nullptr;
  if (platform_name_ == "cpu") {
    // The XLA CPU loader logs a false alarm per load on AVX-512 hosts (pjrt/stderr_filter.h).
    StderrFilter quiet(is_tuning_feature_false_alarm);
    error = api()->PJRT_Executable_DeserializeAndLoad(&args);
  } else {
    error = api()->PJRT_Executable_DeserializeAndLoad(&args);
  }
  check(api(), error, "PJRT_Executable_DeserializeAndLoad");
  return std::make_unique<LoadedExecutable>(api(), args.loaded_executable);
}

Client::HostTransfer Client::buffer_from_host(const void* data, ElementType type,
                                              const std::vector<int64_t>& dims, int device_index,
                                              HostBufferSemantics semantics) const {
  PJRT_Client_BufferFromHostBuffer_Args args{};
  args.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  args.client = client_;
  args.data = data;
  args.type = to_pjrt(type);
  args.dims = dims.data();
  args.num_dims = dims.size();
  switch (semantics) {
    case HostBufferSemantics::kCopyDuringCall:
      args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
      break;
    case HostBufferSemantics::kKeepUntilTransferred:
      args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
      break;
    case HostBufferSemantics::kZeroCopy:
      args.host_buffer_semantics = PJRT_HostBufferSemantics_kMutableZeroCopy;
      break;
  }
  args.device = devices_.at(device_index).raw;
  check(api(), api()->PJRT_Client_BufferFromHostBuffer(&args), "host-to-device transfer");
  HostTransfer out;
  out.buffer = std::make_unique<Buffer>(api(), args.buffer);
  if (args.done_with_host_buffer != nullptr) {
    out.done_with_host = std::make_unique<Event>(api(), args.done_with_host_buffer);
  }
  return out;
}

std::optional<MemoryStats> Client::memory_stats(int device_index) const {
  PJRT_Device_MemoryStats_Args args{};
  args.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
  args.device = devices_.at(device_index).raw;
  if (PJRT_Error* err = api()->PJRT_Device_MemoryStats(&args)) {
    consume_error(api(), err);  // e.g. UNIMPLEMENTED on the CPU plugin
    return std::nullopt;
  }
  MemoryStats stats;
  stats.bytes_in_use = args.bytes_in_use;
  if (args.peak_bytes_in_use_is_set) stats.peak_bytes_in_use = args.peak_bytes_in_use;
  if (args.num_allocs_is_set) stats.num_allocs = args.num_allocs;
  if (args.largest_alloc_size_is_set) stats.largest_alloc_size = args.largest_alloc_size;
  if (args.bytes_limit_is_set) stats.bytes_limit = args.bytes_limit;
  if (args.bytes_reserved_is_set) stats.bytes_reserved = args.bytes_reserved;
  if (args.peak_bytes_reserved_is_set) stats.peak_bytes_reserved = args.peak_bytes_reserved;
  return stats;
}

}  // namespace tpu::pjrt
