#include "host_kernels/registry.h"

#include <vector>

#include "common/env_flag.h"
#include "host_kernels/eig.h"
#include "host_kernels/packed_matmul.h"
#include "host_kernels/paged_decode_attention.h"
#include "pjrt/ffi_extension.h"

namespace tpu::host_kernels {
namespace {

struct Entry {
  const char* name;
  void* (*handler)();
  bool (*available)();  // nullptr: always
};

constexpr Entry kKernels[] = {
    {kPagedDecodeAttention, &paged_decode_attention_handler, nullptr},
    {kPackedMatmul, &packed_matmul_handler, nullptr},
    {kEig, &eig_handler, &eig_available},
};

std::vector<Entry>& extension_kernels() {
  static std::vector<Entry> kernels;
  return kernels;
}

}  // namespace

bool add_extension_kernel(const char* name, void* (*handler)(), bool (*available)()) {
  extension_kernels().push_back(Entry{name, handler, available});
  return true;
}

std::vector<std::string> register_all(const PJRT_Api* api, const std::string& platform) {
  std::vector<std::string> names;
  if (!env_flag("TORCH_TPU_HOST_KERNELS", true) || !pjrt::has_ffi_handler_registration(api)) return names;
  auto add = [&](const Entry& e) {
    if (e.available != nullptr && !e.available()) return;
    pjrt::register_ffi_handler(api, e.name, e.handler(), platform);
    names.push_back(e.name);
  };
  for (const Entry& e : kKernels) add(e);
  for (const Entry& e : extension_kernels()) add(e);
  return names;
}

}  // namespace tpu::host_kernels
