#include "pjrt/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstddef>

#include "pjrt/error.h"

namespace tpu::pjrt {

namespace {

// Every PJRT_Api entry this project calls. A plugin whose function table does not reach one of
// these (an older minor version) is refused at load time instead of crashing later.
#define TPU_PJRT_USED_FUNCTIONS(X)                                                           \
  X(PJRT_Error_Destroy) X(PJRT_Error_Message) X(PJRT_Error_GetCode)                          \
  X(PJRT_Plugin_Initialize) X(PJRT_Plugin_Attributes)                                        \
  X(PJRT_Event_Destroy) X(PJRT_Event_IsReady) X(PJRT_Event_Error) X(PJRT_Event_Await)        \
  X(PJRT_Event_OnReady)                                                                      \
  X(PJRT_Client_Create) X(PJRT_Client_Destroy) X(PJRT_Client_PlatformName)                   \
  X(PJRT_Client_PlatformVersion) X(PJRT_Client_AddressableDevices) X(PJRT_Client_Compile)    \
  X(PJRT_Client_BufferFromHostBuffer)                                                        \
  X(PJRT_Device_GetDescription) X(PJRT_Device_MemoryStats)                                   \
  X(PJRT_DeviceDescription_Id) X(PJRT_DeviceDescription_Kind)                                \
  X(PJRT_DeviceDescription_DebugString)                                                      \
  X(PJRT_Executable_Destroy) X(PJRT_Executable_NumOutputs) X(PJRT_Executable_Serialize)      \
  X(PJRT_LoadedExecutable_Destroy) X(PJRT_LoadedExecutable_GetExecutable)                    \
  X(PJRT_LoadedExecutable_Execute) X(PJRT_Executable_DeserializeAndLoad)                     \
  X(PJRT_Buffer_Destroy) X(PJRT_Buffer_ElementType) X(PJRT_Buffer_Dimensions)                \
  X(PJRT_Buffer_OnDeviceSizeInBytes) X(PJRT_Buffer_Delete) X(PJRT_Buffer_IsDeleted)          \
  X(PJRT_Buffer_CopyToDevice) X(PJRT_Buffer_ToHostBuffer) X(PJRT_Buffer_ReadyEvent)

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

[[noreturn]] void fail(const std::string& path, const std::string& reason, const std::string& fix) {
  throw PluginError("torch_tpu could not load the PJRT plugin '" + path + "': " + reason +
                    ". Fix: " + fix);
}

const char* kFixSelect =
    "point TORCH_TPU_PJRT_PLUGIN at a PJRT plugin shared library (libtpu.so, an XLA CUDA "
    "plugin, or the XLA CPU plugin from the 'xla-cpu-pjrt' package), or unset it to use the "
    "default CPU plugin";

}  // namespace

std::vector<std::string> Plugin::missing_functions(const PJRT_Api* api) {
  std::vector<std::string> missing;
#define TPU_CHECK_FN(name)                                                       \
  if (offsetof(PJRT_Api, name) + sizeof(void*) > api->struct_size ||             \
      api->name == nullptr) {                                                    \
    missing.push_back(#name);                                                    \
  }
  TPU_PJRT_USED_FUNCTIONS(TPU_CHECK_FN)
#undef TPU_CHECK_FN
  return missing;
}

std::string Plugin::api_version_string() const {
  return std::to_string(major_) + "." + std::to_string(minor_);
}

std::shared_ptr<Plugin> Plugin::load(const std::string& path) {
  if (path.empty()) fail(path, "no plugin path was given", kFixSelect);
  if (!file_exists(path)) fail(path, "the file does not exist", kFixSelect);

  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    fail(path, std::string("dlopen failed: ") + (why ? why : "unknown error"),
         "make sure the file is a PJRT plugin built for this machine (x86-64 Linux) and that "
         "its own shared-library dependencies are installed; " + std::string(kFixSelect));
  }
  using GetApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetApiFn>(::dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    ::dlclose(handle);
    fail(path, "the library does not export GetPjrtApi, so it is not a PJRT plugin", kFixSelect);
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr) fail(path, "GetPjrtApi() returned null", kFixSelect);

  auto plugin = std::shared_ptr<Plugin>(new Plugin());
  plugin->path_ = path;
  plugin->api_ = api;
  plugin->major_ = api->pjrt_api_version.major_version;
  plugin->minor_ = api->pjrt_api_version.minor_version;

  if (plugin->major_ != PJRT_API_MAJOR) {
    fail(path,
         "it implements PJRT C API " + plugin->api_version_string() + " but torch_tpu was built "
         "against major version " + std::to_string(PJRT_API_MAJOR) + " (" +
         std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR) + ")",
         "use a plugin with PJRT C API major version " + std::to_string(PJRT_API_MAJOR) +
         ", or rebuild torch_tpu against that plugin's pjrt_c_api.h");
  }
  std::vector<std::string> missing = missing_functions(api);
  if (!missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    fail(path,
         "its PJRT C API " + plugin->api_version_string() + " lacks functions torch_tpu calls (" +
             names + ")",
         "use a newer plugin (torch_tpu was built against PJRT C API " +
             std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR) + ")");
  }

  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  try {
    check(api, api->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");
  } catch (const PjrtError& e) {
    fail(path, e.what(), "check the plugin's own documentation for its requirements");
  }

  PJRT_Plugin_Attributes_Args attrs{};
  attrs.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE;
  if (PJRT_Error* err = api->PJRT_Plugin_Attributes(&attrs)) {
    consume_error(api, err);  // attributes are informative only
  } else {
    for (size_t i = 0; i < attrs.num_attributes; ++i) {
      const PJRT_NamedValue& nv = attrs.attributes[i];
      PluginAttribute a;
      a.name.assign(nv.name, nv.name_size);
      switch (nv.type) {
        case PJRT_NamedValue_kString: a.string_value.assign(nv.string_value, nv.value_size); break;
        case PJRT_NamedValue_kInt64: a.int_values.push_back(nv.int64_value); break;
        case PJRT_NamedValue_kInt64List:
          a.int_values.assign(nv.int64_array_value, nv.int64_array_value + nv.value_size);
          break;
        case PJRT_NamedValue_kBool: a.int_values.push_back(nv.bool_value ? 1 : 0); break;
        case PJRT_NamedValue_kFloat: a.string_value = std::to_string(nv.float_value); break;
        default: break;
      }
      plugin->attributes_.push_back(std::move(a));
    }
  }
  return plugin;
}

}  // namespace tpu::pjrt
