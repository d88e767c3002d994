// RAII wrapper of PJRT_Client: creation with named options, addressable devices, compilation,
// host-to-device transfers, executable deserialization and device memory statistics.
#pragma once

#include <cstdint>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/element_type.h"
#include "pjrt/buffer.h"
#include "pjrt/c_api.h"
#include "pjrt/event.h"
#include "pjrt/executable.h"
#include "pjrt/key_value_store.h"
#include "pjrt/plugin.h"

namespace tpu::pjrt {

// A PJRT_NamedValue client-creation option.
struct NamedOption {
  enum class Kind { kInt64, kBool, kString, kFloat, kInt64List };
  std::string name;
  Kind kind = Kind::kInt64;
  int64_t int_value = 0;
  std::vector<int64_t> int_list;
  bool bool_value = false;
  std::string string_value;
  float float_value = 0;

  static NamedOption int64(std::string n, int64_t v) { NamedOption o; o.name = std::move(n); o.kind = Kind::kInt64; o.int_value = v; return o; }
  static NamedOption boolean(std::string n, bool v) { NamedOption o; o.name = std::move(n); o.kind = Kind::kBool; o.bool_value = v; return o; }
  static NamedOption string(std::string n, std::string v) { NamedOption o; o.name = std::move(n); o.kind = Kind::kString; o.string_value = std::move(v); return o; }
  static NamedOption floating(std::string n, float v) { NamedOption o; o.name = std::move(n); o.kind = Kind::kFloat; o.float_value = v; return o; }
  static NamedOption int64_list(std::string n, std::vector<int64_t> v) { NamedOption o; o.name = std::move(n); o.kind = Kind::kInt64List; o.int_list = std::move(v); return o; }
};

struct DeviceInfo {
  PJRT_Device* raw = nullptr;
  int id = 0;
  std::string kind;          // e.g. "cpu", "NVIDIA H200", "TPU v5 lite"
  std::string debug_string;  // e.g. "TFRT_CPU_0"
  // The description's integer attributes (PJRT_DeviceDescription_Attributes), e.g. a TPU's
  // "coords" and "slice_index"; an int is a list of one. The CPU plugin reports none of these.
  std::map<std::string, std::vector<int64_t>> int_attributes;
};

// What PJRT_Device_MemoryStats reports; the optional fields are those a plugin may leave unset.
struct MemoryStats {
  int64_t bytes_in_use = 0;
  std::optional<int64_t> peak_bytes_in_use;
  std::optional<int64_t> num_allocs;
  std::optional<int64_t> largest_alloc_size;
  std::optional<int64_t> bytes_limit;
  std::optional<int64_t> bytes_reserved;
  std::optional<int64_t> peak_bytes_reserved;
};

// How the runtime may use host memory handed to buffer_from_host.
enum class HostBufferSemantics {
  kCopyDuringCall,       // the call copies the bytes; the caller may reuse them at once
  kKeepUntilTransferred, // the caller keeps the bytes alive until done_with_host fires
  // The buffer may be the host memory itself (the XLA CPU plugin), which the runtime may also
  // reuse for outputs; the caller keeps it alive and leaves it alone until done_with_host fires
  // (when the buffer is freed; on other plugins, when the transfer is done).
  kZeroCopy,
};

class Client {
 public:
  // `kv`: the store of a multi-process run (see key_value_store.h); kept alive by the client.
  static std::unique_ptr<Client> create(std::shared_ptr<Plugin> plugin,
                                        const std::vector<NamedOption>& options,
                                        std::shared_ptr<KeyValueStore> kv = nullptr);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const PJRT_Api* api() const { return plugin_->api(); }
  const Plugin& plugin() const { return *plugin_; }
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  const std::vector<DeviceInfo>& devices() const { return devices_; }

  // Compiles StableHLO given as MLIR text. `compile_options` is a serialized
  // xla.CompileOptionsProto (see compile_options.h).
  std::unique_ptr<LoadedExecutable> compile(const std::string& mlir,
                                            const std::string& compile_options) const;
  std::unique_ptr<LoadedExecutable> deserialize(const std::string& bytes) const;

  struct HostTransfer {
    std::unique_ptr<Buffer> buffer;
    std::unique_ptr<Event> done_with_host;  // may be null
  };
  // Creates a device buffer from dense row-major host data.
  HostTransfer buffer_from_host(const void* data, ElementType type, const std::vector<int64_t>& dims,
                                int device_index, HostBufferSemantics semantics) const;

  // Memory statistics of a device, when the plugin reports them.
  std::optional<MemoryStats> memory_stats(int device_index) const;

 private:
  Client() = default;
  std::shared_ptr<Plugin> plugin_;
  std::shared_ptr<KeyValueStore> kv_;
  PJRT_Client* client_ = nullptr;
  std::string platform_name_;
  std::string platform_version_;
  std::vector<DeviceInfo> devices_;
};

}  // namespace tpu::pjrt
