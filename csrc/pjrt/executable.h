// RAII wrapper of PJRT_LoadedExecutable: execution with donation control, serialization.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pjrt/buffer.h"
#include "pjrt/c_api.h"
#include "pjrt/event.h"

namespace tpu::pjrt {

class LoadedExecutable {
 public:
  LoadedExecutable(const PJRT_Api* api, PJRT_LoadedExecutable* exe);
  ~LoadedExecutable();
  LoadedExecutable(const LoadedExecutable&) = delete;
  LoadedExecutable& operator=(const LoadedExecutable&) = delete;

  size_t num_outputs() const { return num_outputs_; }

  struct Result {
    std::vector<std::unique_ptr<Buffer>> outputs;
    std::unique_ptr<Event> done;  // fires when the execution has finished on the device
  };
  // Enqueues one execution on `device` and returns at once. Arguments whose index is listed in
  // `non_donatable` are never donated even if the program aliases them to an output.
  Result execute(const std::vector<PJRT_Buffer*>& args, PJRT_Device* device,
                 const std::vector<int64_t>& non_donatable) const;
  // The same without wrappers (the launcher's hot path): writes num_outputs() owned buffers to
  // `outputs` and returns the owned completion event (may be null). `launch_id` (non-zero) names
  // one multi-device launch: every device's part of it passes the same id, and the plugin's
  // collectives match parts by it.
  PJRT_Event* execute_raw(PJRT_Buffer* const* args, size_t num_args, PJRT_Device* device,
                          const std::vector<int64_t>& non_donatable, PJRT_Buffer** outputs,
                          int launch_id = 0) const;
  const PJRT_Api* api() const { return api_; }

  // The compiled executable as bytes that Client::deserialize accepts.
  std::string serialize() const;

  // What the program cache calls it (its text's fingerprint: the file TORCH_TPU_DUMP_HLO writes);
  // set once, before the executable is shared. Traces name executions by it.
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

 private:
  const PJRT_Api* api_;
  PJRT_LoadedExecutable* exe_;
  PJRT_Executable* executable_ = nullptr;
  size_t num_outputs_ = 0;
  std::string name_;
};

}  // namespace tpu::pjrt
