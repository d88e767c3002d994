// The devices a collective program runs on, and how one rank's part of it is launched.
//
// An OpCall with a group (exec/op_call.h) is compiled once for the group's device assignment -
// one replica per device, in group-rank order - and cached like every program. In Strict and
// Debug Eager (and outside an spmd_safe region or a torch.compile capture) it runs as a program
// of its own, never queued like other ops: the group launches this rank's part, so that every
// rank's part of one collective is launched together, or none is (a part left alone waits inside
// the plugin, and XLA:CPU aborts the process after 40 s).
//
// Where every rank promises the same op stream (torch.tpu.distributed.spmd_safe, a compiled
// graph), a collective is recorded into the device's deferred graph instead: the whole graph
// becomes one replicated program with StableHLO collectives, and the group launches this rank's
// part of it with launch_program.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/launch_queue.h"

namespace tpu::exec {

class ReplicaGroup : public std::enable_shared_from_this<ReplicaGroup> {
 public:
  virtual ~ReplicaGroup() = default;
  // Global PJRT device ids, by group rank.
  virtual const std::vector<int64_t>& devices() const = 0;
  // Launches this rank's part of the collective being run (its outputs are promised; on
  // failure they are failed and the error is thrown).
  virtual void launch(runtime::Launch launch) const = 0;
  // Hands this rank's part of a whole program holding collectives of this group (a fused graph,
  // a compiled graph's replay) to its device's group launcher (runtime/group_launcher.h) and
  // returns: the outputs are promised. The ranks first compare `signature` (the program's
  // fingerprint and what it is), so ranks about to run different programs get a clear error -
  // in the outputs, which their readers raise - instead of waiting for each other inside the
  // plugin.
  virtual void launch_program(runtime::Launch launch, const std::string& signature) const = 0;
  // The group's process group is gone (destroyed or aborted): a program compiled for it can no
  // longer run (a compiled graph then captures again, for the current group).
  virtual bool closed() const = 0;
};

}  // namespace tpu::exec
