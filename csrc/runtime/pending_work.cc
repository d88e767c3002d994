#include "runtime/pending_work.h"

#include <atomic>

namespace tpu::runtime {

namespace {
std::atomic<PendingWork*> g_work{nullptr};
}  // namespace

void set_pending_work(PendingWork* work) { g_work.store(work); }
PendingWork* pending_work() { return g_work.load(); }

void flush_pending_work() {
  if (PendingWork* w = g_work.load()) w->flush();
}

void flush_pending_work_on(int device) {
  if (PendingWork* w = g_work.load()) w->flush_device(device);
}

bool has_pending_work_on(int device) {
  const PendingWork* w = g_work.load();
  return w != nullptr && w->pending_on(device);
}

void flush_pending_work_for(const DeviceStorage* storage) {
  if (PendingWork* w = g_work.load()) w->flush_for(storage);
}

void note_host_read() {
  if (PendingWork* w = g_work.load()) w->host_read();
}

}  // namespace tpu::runtime
