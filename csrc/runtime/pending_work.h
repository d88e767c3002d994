// Work that has been recorded but not yet enqueued on a device (the deferred graph of Fused
// Eager). The runtime does not know how that work is built; it only asks for it to be
// flushed when data must be real (a host read, a synchronize, an event) and tells it when a
// storage it refers to is overwritten from outside or destroyed.
#pragma once

namespace tpu::runtime {

class DeviceStorage;

class PendingWork {
 public:
  virtual ~PendingWork() = default;
  // Enqueues everything recorded so far; afterwards no storage is pending.
  virtual void flush() = 0;
  // Like flush(), because `storage`'s contents are needed now: the work may launch what that
  // storage depends on first and the rest behind it.
  virtual void flush_for(const DeviceStorage* storage) { flush(); }
  // Like flush(), for the work of `device` only: a collective or a synchronize of one device
  // must not cut what other threads record for theirs (ranks that run as threads would then
  // cut each other's graphs at points that change from step to step).
  virtual void flush_device(int device) { flush(); }
  // Whether work recorded for `device` waits to be enqueued.
  virtual bool pending_on(int device) const { return false; }
  // `storage` gets contents from outside the recorder, or (`destroyed`) is being destroyed:
  // forget it.
  virtual void forget(DeviceStorage* storage, bool destroyed) = 0;
  // Device data is being read on the host (a value the recorded work may depend on: a capture
  // that sees one is not the whole computation - its result would bake the value in).
  virtual void host_read() {}
};

// Installed once by the executor layer; null until then.
void set_pending_work(PendingWork* work);
PendingWork* pending_work();
// Flushes the pending work, if any.
void flush_pending_work();
// Flushes the pending work of `device`, if any.
void flush_pending_work_on(int device);
// Whether work recorded for `device` waits to be enqueued.
bool has_pending_work_on(int device);
// Flushes the pending work, if any, because `storage`'s contents are needed now.
void flush_pending_work_for(const DeviceStorage* storage);
// Tells the pending work, if any, that device data is being read on the host.
void note_host_read();

}  // namespace tpu::runtime
