#include "runtime/transfers.h"

#include <stdexcept>
#include <utility>

#include "profiler/trace_hooks.h"
#include "runtime/pending_work.h"

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

void download(const pjrt::Buffer& buffer, void* dst, size_t nbytes, const char* writer,
              WorkTracker& tracker) {
  profiler::HostSpan span("wait");
  note_host_read();
  try {
    buffer.to_host(dst, nbytes);
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
