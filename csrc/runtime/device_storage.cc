#include "runtime/device_storage.h"

#include "runtime/pending_work.h"

namespace tpu::runtime {

DeviceStorage::~DeviceStorage() {
  if (tracked()) {
    if (PendingWork* w = pending_work()) w->forget(this, true);
  }
}

size_t DeviceStorage::nbytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return nbytes_;
}

void DeviceStorage::set_nbytes(size_t nbytes) {
  std::lock_guard<std::mutex> lock(mu_);
  nbytes_ = nbytes;
}

DeviceStorage::Contents DeviceStorage::contents() const {
  if (pending()) flush_pending_work_for(this);
  return current_contents();
}

std::shared_ptr<pjrt::Buffer> DeviceStorage::buffer_if(const hlo::TensorType& type) const {
  if (pending()) flush_pending_work_for(this);
  std::lock_guard<std::mutex> lock(mu_);
  return type_ == type ? buffer_ : nullptr;
}

DeviceStorage::Contents DeviceStorage::current_contents() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Contents{buffer_, type_};
}

void DeviceStorage::resolve(std::shared_ptr<pjrt::Buffer> buffer, hlo::TensorType type,
                            const char* writer) {
  std::shared_ptr<pjrt::Buffer> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(buffer_);
    buffer_ = std::move(buffer);
    type_ = std::move(type);
    writer_ = writer;
  }
  // `old` is released outside the lock.
}

void DeviceStorage::set_contents(std::shared_ptr<pjrt::Buffer> buffer, hlo::TensorType type,
                                 const char* writer) {
  if (tracked()) {
    if (PendingWork* w = pending_work()) w->forget(this, false);
  }
  resolve(std::move(buffer), std::move(type), writer);
}

void DeviceStorage::clear() {
  if (tracked()) {
    if (PendingWork* w = pending_work()) w->forget(this, false);
  }
  std::shared_ptr<pjrt::Buffer> old;
  std::lock_guard<std::mutex> lock(mu_);
  old = std::move(buffer_);
  buffer_.reset();
}

const char* DeviceStorage::last_writer() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writer_;
}

}  // namespace tpu::runtime
