// Outstanding device work of one device: the completion events of enqueued executions and
// transfers, each with the op it came from, so a synchronize can wait for everything and name
// the op behind a device-side error.
#pragma once

#include <algorithm>
#include <cstdint>

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "pjrt/buffer.h"
#include "pjrt/event.h"
#include "runtime/deferred_checks.h"

namespace tpu::runtime {

class WorkTracker {
 public:
  explicit WorkTracker(int device) : device_(device) {}

  // Records work; when more than `kMaxPending` items are outstanding the oldest is awaited
  // first, which bounds how far the host runs ahead (as a CUDA launch queue does).
  // `keep` are the buffers the work reads or writes: they are released only after it has
  // finished (the XLA CPU plugin reuses a destroyed buffer's memory at once, even while an
  // enqueued execution still reads it).
  // `keep[first_output:]` are the buffers the work produces: until it finishes they count as
  // held only while being defined (pjrt::Buffer::defining_holds), so the next program may
  // still take them over (donation) - PJRT orders that after their definition.
  void add(std::shared_ptr<pjrt::Event> done, const char* label,
           std::vector<std::shared_ptr<pjrt::Buffer>> keep = {}, size_t first_output = SIZE_MAX);
  // Keeps an error found while launching work (not tied to an event) for the next synchronize.
  void note_error(const std::string& message);
  // A host read has raised `message` (a device error of the work that wrote what it read): the
  // next synchronize does not raise it again, so a process that handles the error (an
  // out-of-memory one: free tensors, retry smaller) goes on.
  void reported(const std::string& message);
  // Waits for all recorded work (flushing this device's deferred work and the launch queue first). Throws std::runtime_error naming the op of the first failure.
  void synchronize();
  // True when nothing is queued for launch and every recorded item has finished (errors are kept for the next synchronize).
  bool idle();
  // The events of the outstanding work (for torch Event.record).
  std::vector<std::shared_ptr<pjrt::Event>> pending();
  // Device-side assertions of this device (torch._assert_async), raised by the next synchronize
  // or blocking host read (runtime/deferred_checks.h).
  DeferredChecks& checks() { return checks_; }

  static constexpr size_t kMaxPending = 4096;

 private:
  struct Item {
    Item(std::shared_ptr<pjrt::Event> d, const char* l, std::vector<std::shared_ptr<pjrt::Buffer>> k, size_t first)
        : done(std::move(d)), label(l), keep(std::move(k)), first_output(std::min(first, keep.size())) {
      for (size_t i = first_output; i < keep.size(); ++i) keep[i]->hold_while_defined();
    }
    Item(Item&& other) noexcept
        : done(std::move(other.done)), label(other.label), keep(std::move(other.keep)),
          first_output(other.first_output) {
      other.keep.clear();
    }
    Item& operator=(Item&&) = delete;
    Item(const Item&) = delete;
    ~Item() {
      for (size_t i = first_output; i < keep.size(); ++i) keep[i]->release_defined_hold();
    }
    std::shared_ptr<pjrt::Event> done;
    const char* label;
    std::vector<std::shared_ptr<pjrt::Buffer>> keep;
    size_t first_output;
  };
  void prune_locked();
  void note_error_locked(const Item& item, const pjrt::ErrorInfo& error);

  const int device_;  // whose deferred work a synchronize flushes
  std::mutex mu_;
  std::deque<Item> items_;
  std::optional<std::string> first_error_;
  std::vector<std::string> reported_;  // raised by host reads, not yet met by prune_locked
  DeferredChecks checks_;
};

// "torch_tpu: device error in aten::foo: <message>"
std::string device_error_message(const char* label, const std::string& message);
// True when `message` is already a device_error_message (an error passed on from a failed input).
bool is_device_error_message(const std::string& message);

}  // namespace tpu::runtime
