#include "runtime/transfers.h"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "profiler/trace_hooks.h"
#include "runtime/pending_work.h"
#include "runtime/runtime.h"

namespace tpu::runtime {

std::shared_ptr<pjrt::Buffer> upload(const pjrt::Client& client, const void* data, ElementType dtype,
                                     const hlo::Dims& dims, int device) {
  auto transfer = client.buffer_from_host(data, dtype, dims, device, pjrt::HostBufferSemantics::kCopyDuringCall);
  if (transfer.done_with_host) transfer.done_with_host->await("host-to-device transfer");
  return std::shared_ptr<pjrt::Buffer>(std::move(transfer.buffer));
}

std::shared_ptr<pjrt::Buffer> upload_async(const pjrt::Client& client, const void* data,
                                           ElementType dtype, const hlo::Dims& dims, int device,
                                           std::shared_ptr<const void> keep, WorkTracker& tracker) {
  auto transfer =
      client.buffer_from_host(data, dtype, dims, device, pjrt::HostBufferSemantics::kKeepUntilTransferred);
  if (transfer.done_with_host) {
    // The host memory must outlive the transfer.
    std::shared_ptr<pjrt::Event> done(std::move(transfer.done_with_host));
    done->on_ready([keep = std::move(keep)](const pjrt::ErrorInfo*) mutable { keep.reset(); });
    tracker.add(done, "non-blocking host-to-device copy");
  }
  return std::shared_ptr<pjrt::Buffer>(std::move(transfer.buffer));
}

AdoptedUpload upload_adopting(const pjrt::Client& client, const void* data, ElementType dtype,
                              const hlo::Dims& dims, int device) {
  auto transfer = client.buffer_from_host(data, dtype, dims, device, pjrt::HostBufferSemantics::kZeroCopy);
  return AdoptedUpload{std::shared_ptr<pjrt::Buffer>(std::move(transfer.buffer)),
                       std::shared_ptr<pjrt::Event>(std::move(transfer.done_with_host))};
}

namespace {
std::atomic<int64_t> g_reads{0};
std::atomic<int64_t> g_reads_in_place{0};

// Where device buffers are host memory (the XLA CPU plugin), a read waits for the buffer on this
// thread and copies it in place. PJRT's ToHostBuffer would schedule the copy on the client's
// thread pool and wake this thread from there: two thread hops, ~60 us on a 2-core machine, more
// than a small program's whole run. False (nothing read) where the plugin stores the data in
// another layout or size than the dense host array.
bool read_in_place(const pjrt::Buffer& buffer, void* dst, size_t nbytes) {
  // (A client made without the runtime, as in the C++ tests, transfers.)
  if (!Runtime::created() || !Runtime::get().device_memory_is_host()) return false;
  if (buffer.on_device_size() != nbytes || !buffer.dense_row_major()) return false;
  buffer.ready_event()->await("device-to-host transfer");
  std::memcpy(dst, buffer.unsafe_pointer(), nbytes);
  return true;
}

}  // namespace

void read(const pjrt::Buffer& buffer, void* dst, size_t nbytes) {
  g_reads.fetch_add(1, std::memory_order_relaxed);
  if (read_in_place(buffer, dst, nbytes)) {
    g_reads_in_place.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  buffer.to_host(dst, nbytes);
}

bool read_flag(const pjrt::Buffer& buffer) {
  uint8_t value = 0;  // a PRED scalar is one byte
  read(buffer, &value, 1);
  return value != 0;
}

ReadStats read_stats() { return {g_reads.load(), g_reads_in_place.load()}; }

void download(const pjrt::Buffer& buffer, void* dst, size_t nbytes, const char* writer,
              WorkTracker& tracker) {
  profiler::HostSpan span("wait");
  note_host_read();
  try {
    read(buffer, dst, nbytes);
  } catch (const std::exception& e) {
    std::string message = is_device_error_message(e.what()) ? e.what() : device_error_message(writer, e.what());
    tracker.reported(message);
    throw std::runtime_error(message);
  }
  if (auto failed = tracker.checks().take_failure()) throw std::runtime_error(*failed);
}

void download_async(std::shared_ptr<pjrt::Buffer> buffer, void* dst, size_t nbytes, WorkTracker& tracker) {
  note_host_read();
  std::shared_ptr<pjrt::Event> done(buffer->to_host_async(dst, nbytes));
  done->on_ready([buffer = std::move(buffer)](const pjrt::ErrorInfo*) mutable { buffer.reset(); });
  tracker.add(done, "non-blocking device-to-host copy");
}

std::shared_ptr<pjrt::Buffer> copy_to_device(const pjrt::Buffer& buffer, const pjrt::DeviceInfo& device) {
  return std::shared_ptr<pjrt::Buffer>(buffer.copy_to_device(device.raw));
}

}  // namespace tpu::runtime
