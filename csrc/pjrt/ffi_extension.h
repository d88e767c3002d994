// PJRT's FFI extension: registering a typed XLA FFI handler (a function the plugin calls for a
// `stablehlo.custom_call` with api_version 4) with the plugin's own handler registry.
//
// The extension's header is not shipped with the plugin package, so the two structs this
// project uses are declared here from the published ABI (xla/pjrt/c/pjrt_c_api_ffi_extension.h,
// extension version 2): the extension's function table and the arguments of its
// register_handler call. Plugins built before register_handler existed have a shorter table;
// that is detected from the struct size, not assumed.
#pragma once

#include <string>

#include "pjrt/c_api.h"

namespace tpu::pjrt {

// Whether the plugin offers handler registration through its FFI extension.
bool has_ffi_handler_registration(const PJRT_Api* api);

// Registers `handler` (an XLA_FFI_Handler*) as the custom-call target `target` on `platform`
// ("Host" for the XLA CPU plugin). Throws PjrtError with the plugin's message on failure and
// std::runtime_error when the plugin has no such registration.
void register_ffi_handler(const PJRT_Api* api, const std::string& target, void* handler,
                          const std::string& platform);

}  // namespace tpu::pjrt
