// torch.compile(backend="tpu") capture: begin switches the deferred graph's recording on (the
// caller has put the device in Fused mode); end runs the recorded graph and returns it as a
// CompiledGraph (not replayable when the capture was cut, e.g. by an op that read data on the
// host).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "compile/compiled_graph.h"

namespace tpu::compile {

void capture_begin(bool bake);
CompiledGraph capture_end(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs);

}  // namespace tpu::compile
