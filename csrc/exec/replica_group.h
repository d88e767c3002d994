// The devices a collective program runs on, and how one rank's part of it is launched.
//
// An OpCall with a group (exec/op_call.h) is compiled once for the group's device assignment -
// one replica per device, in group-rank order - and cached like every program. It is never
// recorded into the deferred graph and never queued like other ops: the group launches this
// rank's part, so that every rank's part of one collective is launched together, or none is
// (a part left alone waits inside the plugin, and XLA:CPU aborts the process after 40 s).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/launch_queue.h"

namespace tpu::exec {

class ReplicaGroup {
 public:
  virtual ~ReplicaGroup() = default;
  // Global PJRT device ids, by group rank.
  virtual const std::vector<int64_t>& devices() const = 0;
  // Launches this rank's part (its outputs are promised; on failure they are failed and the
  // error is thrown).
  virtual void launch(runtime::Launch launch) const = 0;
};

}  // namespace tpu::exec
