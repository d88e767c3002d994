#include "host_kernels/registry.h"

#include "common/env_flag.h"
#include "host_kernels/packed_matmul.h"
#include "host_kernels/paged_decode_attention.h"
#include "pjrt/ffi_extension.h"

namespace tpu::host_kernels {
namespace {

struct Entry {
  const char* name;
  void* (*handler)();
};

constexpr Entry kKernels[] = {
    {kPagedDecodeAttention, &paged_decode_attention_handler},
    {kPackedMatmul, &packed_matmul_handler},
};

}  // namespace

std::vector<std::string> register_all(const PJRT_Api* api, const std::string& platform) {
  std::vector<std::string> names;
  if (!env_flag("TORCH_TPU_HOST_KERNELS", true) || !pjrt::has_ffi_handler_registration(api)) return names;
  for (const Entry& e : kKernels) {
    pjrt::register_ffi_handler(api, e.name, e.handler(), platform);
    names.push_back(e.name);
  }
  return names;
}

}  // namespace tpu::host_kernels
