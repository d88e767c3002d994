// The part of the XLA FFI C ABI (xla/ffi/api/c_api.h, API 0.1) a host kernel needs, declared
// from the published layout, and `HostCall`, a checked view of one call.
//
// A host kernel is a C++ function the XLA CPU plugin calls for `stablehlo.custom_call @name`
// with api_version 4 (typed FFI): the plugin hands it a call frame holding its operand and
// result buffers (host pointers, row-major) and its attributes (the custom call's
// backend_config dictionary, sorted by name). Before the first call, at registration, XLA asks
// the handler which FFI version it was written for (the metadata extension); `HostCall`
// answers that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tpu::host_kernels {

namespace ffi_abi {

struct ExtensionBase {
  size_t struct_size;
  int32_t type;  // 1: metadata
  ExtensionBase* next;
};
constexpr int32_t kMetadataExtension = 1;

struct ApiVersion {
  size_t struct_size;
  ExtensionBase* extension_start;
  int32_t major_version;
  int32_t minor_version;
};

struct Metadata {
  size_t struct_size;
  ApiVersion api_version;
  uint32_t traits;
};

struct MetadataExtension {
  ExtensionBase base;
  Metadata* metadata;
};

struct Error;
struct ErrorCreateArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  const char* message;
  int32_t code;  // absl status codes: 3 invalid argument, 13 internal
};
using ErrorCreate = Error* (*)(ErrorCreateArgs*);

// Tasks on the XLA runtime's intra-op thread pool (XLA_FFI_ThreadPool_*): ctx is the call frame's.
using Task = void (*)(void* data);
struct ThreadPoolScheduleArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  void* ctx;
  Task task;
  void* data;
};
struct ThreadPoolNumThreadsArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  void* ctx;
  int64_t* num_threads;  // out
};
using ThreadPoolSchedule = Error* (*)(ThreadPoolScheduleArgs*);
using ThreadPoolNumThreads = Error* (*)(ThreadPoolNumThreadsArgs*);

struct Api {
  size_t struct_size;
  ExtensionBase* extension_start;
  ApiVersion api_version;
  void* internal_api;
  ErrorCreate error_create;
  void* unused[10];  // error_get_message .. device_memory_free
  ThreadPoolSchedule thread_pool_schedule;
  ThreadPoolNumThreads thread_pool_num_threads;  // the table goes on; nothing past this is used
};

enum DataType : int32_t { kS32 = 4, kS64 = 5, kU8 = 6, kF16 = 10, kF32 = 11, kF64 = 12, kC64 = 15, kBF16 = 16, kC128 = 18 };

struct Buffer {
  size_t struct_size;
  ExtensionBase* extension_start;
  int32_t dtype;
  void* data;
  int64_t rank;
  int64_t* dims;
};

struct Scalar {
  int32_t dtype;
  void* value;
};

struct ByteSpan {
  const char* ptr;
  size_t len;
};

struct List {  // XLA_FFI_Args and XLA_FFI_Rets
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  int32_t* types;  // 1: buffer
  void** items;
};

struct Attrs {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  int32_t* types;  // 3: scalar
  ByteSpan** names;
  void** attrs;
};
constexpr int32_t kScalarAttr = 3;

struct CallFrame {
  size_t struct_size;
  ExtensionBase* extension_start;
  const Api* api;
  void* ctx;
  int32_t stage;  // 3: execute
  List args;
  List rets;
  Attrs attrs;
};
constexpr int32_t kExecuteStage = 3;

// The FFI version host kernels are written against.
constexpr int32_t kMajor = 0;
constexpr int32_t kMinor = 1;

}  // namespace ffi_abi

// One invocation. Accessors validate what they return; an invalid call becomes a message the
// handler returns as an FFI error (the plugin raises it from the program's execution).
class HostCall {
 public:
  explicit HostCall(ffi_abi::CallFrame* frame) : frame_(frame) {}

  // True when XLA is asking for the handler's metadata (answered here); the handler returns.
  bool answered_metadata() const;
  // True when this is the execute stage (the only stage host kernels act in).
  bool executing() const { return frame_->stage == ffi_abi::kExecuteStage; }

  int64_t num_args() const { return frame_->args.size; }
  int64_t num_results() const { return frame_->rets.size; }
  const ffi_abi::Buffer& arg(int64_t i) const;
  const ffi_abi::Buffer& result(int64_t i) const;
  // A scalar attribute converted to double; `fallback` when the attribute is absent.
  double scalar_attr(std::string_view name, double fallback) const;

  // An FFI error with `message` (nullptr when the frame carries no API to create one).
  ffi_abi::Error* fail(const std::string& message) const;

  // The threads of the XLA runtime's intra-op pool (0: the plugin offers none to this call), and
  // schedules task(data) there (false: not scheduled). XLA runs such tasks when a worker is free,
  // maybe one after another: a caller never waits for a task that has not started.
  int64_t xla_pool_threads() const;
  bool schedule_on_xla_pool(ffi_abi::Task task, void* data) const;

 private:
  ffi_abi::CallFrame* frame_;
};

// The number of elements of a buffer; its dims as (d0, d1, ...).
int64_t element_count(const ffi_abi::Buffer& b);

}  // namespace tpu::host_kernels
