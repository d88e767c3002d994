// When each traced execution ran on its device. The runtime observes a program's launch (PJRT's
// execute call) and its completion; between the two it may wait behind the programs launched
// before it, since a device runs its programs in launch order (the XLA CPU plugin chains each
// execution after the previous one; a GPU stream does the same). A loop that enqueues ahead of
// the device would otherwise show every program spanning the queue in front of it (a 6.9 ms step's
// programs each ~56 ms long). So an execution's start is the later of its launch and the completion
// of the execution before it on the same device.
#pragma once

#include <vector>

#include "profiler/trace_hooks.h"

namespace tpu::profiler {

// Sets start_ns of every record (records of several devices, in any order).
void place_on_devices(std::vector<ExecutionRecord>& runs);

}  // namespace tpu::profiler
