// The host kernels this project gives the XLA CPU plugin, and their registration with it.
// A lowering that uses one asks whether it is registered (the runtime registers them when it
// creates a CPU plugin's client); on other plugins the caller takes its portable formulation.
#pragma once

#include <string>
#include <vector>

#include "pjrt/c_api.h"

namespace tpu::host_kernels {

// A host kernel defined outside the torch-free core (the extension's kernels that call ATen's CPU
// kernels, csrc/host_aten/): added at static-initialisation time, registered with the others.
// `available` may be nullptr (always).
bool add_extension_kernel(const char* name, void* (*handler)(), bool (*available)());

// Registers every host kernel as an FFI handler of `platform` with the plugin behind `api`;
// returns the names registered. A plugin without FFI handler registration registers none
// (that is not an error: the callers fall back), and so does TORCH_TPU_HOST_KERNELS=0.
std::vector<std::string> register_all(const PJRT_Api* api, const std::string& platform);

}  // namespace tpu::host_kernels
