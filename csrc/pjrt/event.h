// RAII wrapper of PJRT_Event: await, poll, and completion callbacks.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "pjrt/c_api.h"
#include "pjrt/error.h"

namespace tpu::pjrt {

class Event {
 public:
  Event(const PJRT_Api* api, PJRT_Event* event) : api_(api), event_(event) {}
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Blocks until the event is ready; throws PjrtError if it completed with an error.
  void await(const char* what = "PJRT_Event_Await");
  bool is_ready() const;
  // After the event is ready: the error it carries, if any (the event keeps its state).
  std::optional<ErrorInfo> error() const;
  // Calls `callback` once the event is ready (possibly at once, possibly on a plugin thread),
  // with nullptr on success or the error otherwise.
  void on_ready(std::function<void(const ErrorInfo*)> callback);

  PJRT_Event* raw() const { return event_; }

 private:
  const PJRT_Api* api_;
  PJRT_Event* event_;
};

}  // namespace tpu::pjrt
