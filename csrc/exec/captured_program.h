// A deferred graph captured for torch.compile: the compiled program of one FX graph and how
// its parameters and outputs relate to storages, so it can be run again on other storages of
// the same layout without recording anything (exec/fused_graph.h captures it).
//
// run_program is also the execution step of every fused flush: one place prepares a whole
// program's launch (donation of aliased parameters included) and hands it to PJRT on the calling
// thread through runtime::launch_now, the same step the launcher runs for per-op programs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hlo/tensor_type.h"
#include "pjrt/buffer.h"
#include "pjrt/executable.h"
#include "runtime/device_storage.h"

namespace tpu::exec {

class ReplicaGroup;

// A program holding collectives (exec/replica_group.h): the group that launches this rank's part
// and the signature the ranks compare first.
struct GroupLaunch {
  std::shared_ptr<const ReplicaGroup> group;
  std::string signature;
};

struct CapturedProgram {
  struct Param {
    runtime::DeviceStorage* storage = nullptr;  // the storage it was read from at capture
    std::shared_ptr<pjrt::Buffer> buffer;        // the buffer it read
    hlo::TensorType type;
  };
  struct Output {
    hlo::TensorType type;
    std::vector<runtime::DeviceStorage*> storages;  // the storages it became at capture
  };
  std::shared_ptr<pjrt::LoadedExecutable> exe;
  int device = -1;
  // False when the capture was cut by a flush or a tracked storage was written from outside
  // the recording (a host upload): the program is not the whole computation.
  bool complete = true;
  std::string cut_reason;  // why it is not complete, when a cut said (else a host read or upload)
  std::vector<Param> params;
  // Runtime arguments after the parameters (offsets and scalars), as device buffers.
  std::vector<std::shared_ptr<pjrt::Buffer>> scalars;
  // False when a runtime argument changes on every call (an RNG seed or offset): the program
  // must then be recorded again per call and cannot be replayed as captured.
  bool scalars_fixed = true;
  std::vector<int> donatable_params;
  std::vector<Output> outputs;
  GroupLaunch collectives;  // set when the program holds collectives
};

// Enqueues `exe` on `device` with `params` (then `scalars`) as arguments, on the calling thread,
// and returns its output buffers. A donatable parameter is donated only when `params` and one storage hold the sole
// references to its buffer. Every buffer involved stays alive until the execution finishes.
// Errors name `label`, which must outlive the work (a string literal). A program with
// collectives (`collectives.group` set) is launched through its group.
std::vector<std::shared_ptr<pjrt::Buffer>> run_program(
    const std::shared_ptr<pjrt::LoadedExecutable>& exe, int device,
    std::vector<std::shared_ptr<pjrt::Buffer>> params,
    std::vector<std::shared_ptr<pjrt::Buffer>> scalars, const std::vector<int>& donatable,
    const char* label, const GroupLaunch& collectives = {});

}  // namespace tpu::exec
