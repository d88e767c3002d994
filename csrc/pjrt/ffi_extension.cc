#include "pjrt/ffi_extension.h"

#include <cstddef>
#include <stdexcept>

#include "pjrt/error.h"

namespace tpu::pjrt {
namespace {

// The ABI of PJRT_FFI_Register_Handler_Args and PJRT_FFI_Extension (extension version 2).
struct RegisterHandlerArgs {
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler;
  const char* platform_name;
  size_t platform_name_size;
  uint32_t traits;  // PJRT_FFI_Handler_TraitsBits; 0: no command-buffer promise
};
constexpr size_t kRegisterHandlerArgsSize = offsetof(RegisterHandlerArgs, traits) + sizeof(uint32_t);

using RegisterHandlerFn = PJRT_Error* (*)(RegisterHandlerArgs*);

struct FfiExtension {
  PJRT_Extension_Base base;
  void* type_id_register;
  void* user_data_add;
  RegisterHandlerFn register_handler;
};

const FfiExtension* find_extension(const PJRT_Api* api) {
  for (const PJRT_Extension_Base* ext = api ? api->extension_start : nullptr; ext; ext = ext->next) {
    if (ext->type == PJRT_Extension_Type_FFI) {
      // Older plugins end the table before register_handler.
      if (ext->struct_size < offsetof(FfiExtension, register_handler) + sizeof(RegisterHandlerFn)) return nullptr;
      auto* ffi = reinterpret_cast<const FfiExtension*>(ext);
      return ffi->register_handler ? ffi : nullptr;
    }
  }
  return nullptr;
}

}  // namespace

bool has_ffi_handler_registration(const PJRT_Api* api) { return find_extension(api) != nullptr; }

void register_ffi_handler(const PJRT_Api* api, const std::string& target, void* handler,
                          const std::string& platform) {
  const FfiExtension* ffi = find_extension(api);
  if (!ffi) {
    throw std::runtime_error("the PJRT plugin has no FFI handler registration (PJRT_FFI extension "
                             "version 2 or later); cannot register '" + target + "'");
  }
  RegisterHandlerArgs args{kRegisterHandlerArgsSize, target.data(), target.size(), handler,
                           platform.data(), platform.size(), 0};
  check(api, ffi->register_handler(&args), ("registering the FFI handler '" + target + "'").c_str());
}

}  // namespace tpu::pjrt
