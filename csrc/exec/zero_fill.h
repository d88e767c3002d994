// Storages a program reads before anything wrote them (fresh torch.empty results) are filled
// with zeros first, by a "full" op that each runner runs its own way (Strict: launched; Fused:
// recorded into the graph).
#pragma once

#include "exec/op_call.h"
#include "runtime/device_storage.h"

namespace tpu::exec {

// The op that zero-fills `storage`, in the dtype of the first view of `call` that refers to it
// (bytes when none fits the storage's size).
OpCall zero_fill_call(const OpCall& call, const runtime::DeviceStorage& storage);

}  // namespace tpu::exec
