// Custom kernels (torch_tpu.kernels): StableHLO functions written outside torch_tpu (lowered
// from JAX or Pallas, or written by hand) that programs call with func.call. The registry maps
// a kernel's symbol to the text of its functions; the "custom_kernel" lowering inlines them
// into whatever module is being built (a per-op program, a Fused graph, a torch.compile graph).
#pragma once

#include <string>

namespace tpu::lowering {

// Registers the functions of a kernel whose entry function is `symbol` (every symbol in `text`
// is already unique to this kernel, e.g. prefixed with a hash of its text). Registering the
// same symbol again keeps the first text. Returns a label that lives as long as the process.
const char* register_custom_kernel(const std::string& symbol, const std::string& text,
                                   const std::string& label);
// The label of a registered kernel; nullptr when `symbol` is not registered.
const char* custom_kernel_label(const std::string& symbol);

}  // namespace tpu::lowering
