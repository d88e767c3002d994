#include "pjrt/buffer.h"

#include <chrono>
#include <stdexcept>

#include "pjrt/buffer_type.h"
#include "pjrt/error.h"

namespace tpu::pjrt {

namespace {
std::atomic<void (*)(const Buffer&)> promise_waiter{nullptr};
// Time inside PJRT_Buffer_Destroy on this thread (benchmarks separate the plugin's frees from
// our host work).
thread_local DestroyCallStats t_destroy;
}  // namespace

DestroyCallStats destroy_call_stats_on_this_thread() { return t_destroy; }

void Buffer::set_promise_waiter(void (*waiter)(const Buffer&)) { promise_waiter.store(waiter); }

PJRT_Buffer* Buffer::await_promise() const {
  if (promised_ && !failed_.load(std::memory_order_acquire)) {
    if (auto waiter = promise_waiter.load()) waiter(*this);
  }
  if (failed_.load(std::memory_order_acquire)) throw std::runtime_error(error_);
  if (PJRT_Buffer* b = buffer_.load(std::memory_order_acquire)) return b;
  throw std::logic_error(promised_ ? "torch_tpu: a promised device buffer was never produced"
                                   : "torch_tpu: use of a released device buffer");
}

void Buffer::fulfil(PJRT_Buffer* buffer) { buffer_.store(buffer, std::memory_order_release); }

void Buffer::fail(std::string message) {
  error_ = std::move(message);
  failed_.store(true, std::memory_order_release);
}

Buffer::~Buffer() {
  PJRT_Buffer* buffer = buffer_.load(std::memory_order_acquire);
  if (buffer == nullptr) return;
  PJRT_Buffer_Destroy_Args args{};
  args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  args.buffer = buffer;
  const auto start = std::chrono::steady_clock::now();
  if (PJRT_Error* err = api_->PJRT_Buffer_Destroy(&args)) consume_error(api_, err);
  t_destroy.nanoseconds += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  ++t_destroy.calls;
}

ElementType Buffer::element_type() const {
  PJRT_Buffer_ElementType_Args args{};
  args.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  args.buffer = raw();
  check(api_, api_->PJRT_Buffer_ElementType(&args), "PJRT_Buffer_ElementType");
  return from_pjrt(args.type);
}

std::vector<int64_t> Buffer::dims() const {
  PJRT_Buffer_Dimensions_Args args{};
  args.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  args.buffer = raw();
  check(api_, api_->PJRT_Buffer_Dimensions(&args), "PJRT_Buffer_Dimensions");
  return std::vector<int64_t>(args.dims, args.dims + args.num_dims);
}

size_t Buffer::on_device_size() const {
  PJRT_Buffer_OnDeviceSizeInBytes_Args args{};
  args.struct_size = PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE;
  args.buffer = raw();
  check(api_, api_->PJRT_Buffer_OnDeviceSizeInBytes(&args), "PJRT_Buffer_OnDeviceSizeInBytes");
  return args.on_device_size_in_bytes;
}

std::unique_ptr<Event> Buffer::to_host_async(void* dst, size_t size) const {
  PJRT_Buffer_ToHostBuffer_Args args{};
  args.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  args.src = raw();
  args.host_layout = nullptr;  // dense, major-to-minor
  args.dst = dst;
  args.dst_size = size;
  check(api_, api_->PJRT_Buffer_ToHostBuffer(&args), "device-to-host transfer");
  return std::make_unique<Event>(api_, args.event);
}

void Buffer::to_host(void* dst, size_t size) const {
  to_host_async(dst, size)->await("device-to-host transfer");
}

std::unique_ptr<Buffer> Buffer::copy_to_device(PJRT_Device* device) const {
  PJRT_Buffer_CopyToDevice_Args args{};
  args.struct_size = PJRT_Buffer_CopyToDevice_Args_STRUCT_SIZE;
  args.buffer = raw();
  args.dst_device = device;
  check(api_, api_->PJRT_Buffer_CopyToDevice(&args), "device-to-device transfer");
  return std::make_unique<Buffer>(api_, args.dst_buffer);
}

std::unique_ptr<Event> Buffer::ready_event() const {
  PJRT_Buffer_ReadyEvent_Args args{};
  args.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
  args.buffer = raw();
  check(api_, api_->PJRT_Buffer_ReadyEvent(&args), "PJRT_Buffer_ReadyEvent");
  return std::make_unique<Event>(api_, args.event);
}

const void* Buffer::unsafe_pointer() const {
  PJRT_Buffer_UnsafePointer_Args args{};
  args.struct_size = PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE;
  args.buffer = raw();
  check(api_, api_->PJRT_Buffer_UnsafePointer(&args), "PJRT_Buffer_UnsafePointer");
  return reinterpret_cast<const void*>(args.buffer_pointer);
}

bool Buffer::dense_row_major() const {
  if (api_->PJRT_Buffer_GetMemoryLayout == nullptr) return false;
  PJRT_Buffer_GetMemoryLayout_Args args{};
  args.struct_size = PJRT_Buffer_GetMemoryLayout_Args_STRUCT_SIZE;
  args.buffer = raw();
  if (PJRT_Error* err = api_->PJRT_Buffer_GetMemoryLayout(&args)) {
    consume_error(api_, err);
    return false;
  }
  if (args.layout.type != PJRT_Buffer_MemoryLayout_Type_Tiled || args.layout.tiled.num_tiles != 0) return false;
  const size_t rank = args.layout.tiled.minor_to_major_size;
  for (size_t i = 0; i < rank; ++i) {
    if (args.layout.tiled.minor_to_major[i] != static_cast<int64_t>(rank - 1 - i)) return false;
  }
  return true;
}

bool Buffer::is_deleted() const {
  PJRT_Buffer_IsDeleted_Args args{};
  args.struct_size = PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE;
  args.buffer = raw();
  check(api_, api_->PJRT_Buffer_IsDeleted(&args), "PJRT_Buffer_IsDeleted");
  return args.is_deleted;
}

void Buffer::release_memory() {
  PJRT_Buffer_Delete_Args args{};
  args.struct_size = PJRT_Buffer_Delete_Args_STRUCT_SIZE;
  args.buffer = raw();
  check(api_, api_->PJRT_Buffer_Delete(&args), "PJRT_Buffer_Delete");
}

}  // namespace tpu::pjrt
