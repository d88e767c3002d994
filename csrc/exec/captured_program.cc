#include "exec/captured_program.h"

#include "exec/program_cache.h"
#include "exec/replica_group.h"
#include "runtime/group_launcher.h"
#include "runtime/launch_queue.h"

namespace tpu::exec {

std::vector<std::shared_ptr<pjrt::Buffer>> run_program(
    const std::shared_ptr<pjrt::LoadedExecutable>& exe, int device,
    std::vector<std::shared_ptr<pjrt::Buffer>> params,
    std::vector<std::shared_ptr<pjrt::Buffer>> scalars, const std::vector<int>& donatable,
    const char* label, const GroupLaunch& collectives) {
  // A donatable argument still promised by a queued eager launch (e.g. the zero fill of a cache
  // just allocated): hand the queue to PJRT first, so the queued launch no longer holds it.
  for (int p : donatable) {
    if (params[p]->unresolved()) {
      runtime::LaunchQueue::get().drain();
      break;
    }
  }
  runtime::Launch launch;
  // Donated only when the storage and `params` hold the sole references - apart from the
  // tracker's while the previous program still defines it (the next step of a serving loop
  // takes over the KV cache the step before is still writing; PJRT orders the two).
  for (int p : donatable) {
    if (!pjrt::donatable(params[p], 2)) launch.non_donatable.push_back(p);
  }
  launch.exe = exe;
  launch.device = device;
  launch.label = label;
  launch.num_args = params.size() + scalars.size();
  launch.buffers = std::move(params);
  launch.buffers.reserve(launch.num_args + exe->num_outputs());
  launch.buffers.insert(launch.buffers.end(), std::make_move_iterator(scalars.begin()),
                        std::make_move_iterator(scalars.end()));
  std::vector<std::shared_ptr<pjrt::Buffer>> outputs;
  outputs.reserve(exe->num_outputs());
  const PJRT_Api* api = exe->api();
  for (size_t i = 0; i < exe->num_outputs(); ++i) {
    outputs.push_back(std::make_shared<pjrt::Buffer>(api));
    launch.buffers.push_back(outputs.back());
  }
  const int64_t donated_now =
      static_cast<int64_t>(donatable.size() - launch.non_donatable.size());
  if (collectives.group != nullptr) {
    collectives.group->launch_program(std::move(launch), collectives.signature);
  } else {
    runtime::launch_program_now_or_behind_group(launch);  // throws, naming `label`, when PJRT refuses it
  }
  ProgramCache::get().count_execution(donated_now);
  return outputs;
}

}  // namespace tpu::exec
