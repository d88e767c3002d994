#include "pjrt/executable.h"

#include "pjrt/error.h"

namespace tpu::pjrt {

LoadedExecutable::LoadedExecutable(const PJRT_Api* api, PJRT_LoadedExecutable* exe)
    : api_(api), exe_(exe) {
  PJRT_LoadedExecutable_GetExecutable_Args get{};
  get.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  get.loaded_executable = exe_;
  check(api_, api_->PJRT_LoadedExecutable_GetExecutable(&get), "PJRT_LoadedExecutable_GetExecutable");
  executable_ = get.executable;
  PJRT_Executable_NumOutputs_Args n{};
  n.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  n.executable = executable_;
  check(api_, api_->PJRT_Executable_NumOutputs(&n), "PJRT_Executable_NumOutputs");
  num_outputs_ = n.num_outputs;
}

LoadedExecutable::~LoadedExecutable() {
  if (executable_ != nullptr) {
    PJRT_Executable_Destroy_Args args{};
    args.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    args.executable = executable_;
    if (PJRT_Error* err = api_->PJRT_Executable_Destroy(&args)) consume_error(api_, err);
  }
  if (exe_ != nullptr) {
    PJRT_LoadedExecutable_Destroy_Args args{};
    args.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
    args.executable = exe_;
    if (PJRT_Error* err = api_->PJRT_LoadedExecutable_Destroy(&args)) consume_error(api_, err);
  }
}

LoadedExecutable::Result LoadedExecutable::execute(const std::vector<PJRT_Buffer*>& args,
                                                   PJRT_Device* device,
                                                   const std::vector<int64_t>& non_donatable) const {
  std::vector<PJRT_Buffer*> outputs(num_outputs_, nullptr);
  PJRT_Event* done = execute_raw(args.data(), args.size(), device, non_donatable, outputs.data());
  Result result;
  result.outputs.reserve(outputs.size());
  for (PJRT_Buffer* b : outputs) result.outputs.push_back(std::make_unique<Buffer>(api_, b));
  if (done != nullptr) result.done = std::make_unique<Event>(api_, done);
  return result;
}

PJRT_Event* LoadedExecutable::execute_raw(PJRT_Buffer* const* args, size_t num_args,
                                          PJRT_Device* device,
                                          const std::vector<int64_t>& non_donatable,
                                          PJRT_Buffer** outputs, int launch_id) const {
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  options.launch_id = launch_id;
  options.non_donatable_input_indices = non_donatable.empty() ? nullptr : non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();

  PJRT_Event* done = nullptr;
  PJRT_LoadedExecutable_Execute_Args exec{};
  exec.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  exec.executable = exe_;
  exec.options = &options;
  exec.argument_lists = &args;
  exec.num_devices = 1;
  exec.num_args = num_args;
  exec.output_lists = &outputs;
  exec.device_complete_events = &done;
  exec.execute_device = device;
  check(api_, api_->PJRT_LoadedExecutable_Execute(&exec), "PJRT_LoadedExecutable_Execute");
  return done;
}

std::string LoadedExecutable::serialize() const {
  PJRT_Executable_Serialize_Args args{};
  args.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
  args.executable = executable_;
  check(api_, api_->PJRT_Executable_Serialize(&args), "PJRT_Executable_Serialize");
  std::string bytes(args.serialized_bytes, args.serialized_bytes_size);
  if (args.serialized_executable_deleter != nullptr) {
    args.serialized_executable_deleter(args.serialized_executable);
  }
  return bytes;
}

}  // namespace tpu::pjrt
