#include "host_kernels/ffi_call_frame.h"

#include <cstddef>
#include <cstring>

namespace tpu::host_kernels {

using namespace ffi_abi;

bool HostCall::answered_metadata() const {
  for (ExtensionBase* ext = frame_->extension_start; ext != nullptr; ext = ext->next) {
    if (ext->type != kMetadataExtension) continue;
    Metadata* md = reinterpret_cast<MetadataExtension*>(ext)->metadata;
    if (md != nullptr) {
      md->api_version.major_version = kMajor;
      md->api_version.minor_version = kMinor;
      md->traits = 0;
    }
    return true;
  }
  return false;
}

const Buffer& HostCall::arg(int64_t i) const {
  return *static_cast<const Buffer*>(frame_->args.items[i]);
}

const Buffer& HostCall::result(int64_t i) const {
  return *static_cast<const Buffer*>(frame_->rets.items[i]);
}

double HostCall::scalar_attr(std::string_view name, double fallback) const {
  const Attrs& a = frame_->attrs;
  for (int64_t i = 0; i < a.size; ++i) {
    const ByteSpan* n = a.names[i];
    if (a.types[i] != kScalarAttr || std::string_view(n->ptr, n->len) != name) continue;
    const auto* s = static_cast<const Scalar*>(a.attrs[i]);
    switch (s->dtype) {
      case kF32: return *static_cast<const float*>(s->value);
      case kS32: return *static_cast<const int32_t*>(s->value);
      case kS64: return static_cast<double>(*static_cast<const int64_t*>(s->value));
      case kF64: return *static_cast<const double*>(s->value);
      default: return fallback;
    }
  }
  return fallback;
}

Error* HostCall::fail(const std::string& message) const {
  const Api* api = frame_->api;
  if (api == nullptr || api->error_create == nullptr) return nullptr;
  ErrorCreateArgs args{sizeof(ErrorCreateArgs), nullptr, message.c_str(), 3};
  return api->error_create(&args);
}

int64_t element_count(const Buffer& b) {
  int64_t n = 1;
  for (int64_t i = 0; i < b.rank; ++i) n *= b.dims[i];
  return n;
}

namespace {
bool has_pool_api(const Api* api) {
  return api != nullptr && api->struct_size >= offsetof(Api, thread_pool_num_threads) + sizeof(void*) &&
         api->thread_pool_schedule != nullptr && api->thread_pool_num_threads != nullptr;
}
}  // namespace

int64_t HostCall::xla_pool_threads() const {
  if (!has_pool_api(frame_->api)) return 0;
  int64_t threads = 0;
  ThreadPoolNumThreadsArgs args{sizeof(ThreadPoolNumThreadsArgs), nullptr, frame_->ctx, &threads};
  if (frame_->api->thread_pool_num_threads(&args) != nullptr) return 0;  // no pool (the error is dropped)
  return threads;
}

bool HostCall::schedule_on_xla_pool(Task task, void* data) const {
  if (!has_pool_api(frame_->api)) return false;
  ThreadPoolScheduleArgs args{sizeof(ThreadPoolScheduleArgs), nullptr, frame_->ctx, task, data};
  return frame_->api->thread_pool_schedule(&args) == nullptr;
}

}  // namespace tpu::host_kernels
