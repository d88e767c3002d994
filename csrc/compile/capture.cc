#include "compile/capture.h"

#include "exec/executor.h"
#include "exec/fused_graph.h"

namespace tpu::compile {

void capture_begin(bool bake) {
  exec::FusedGraph& fused = exec::Executor::get().fused();
  fused.flush();
  fused.set_capturing(true, bake);
}

CompiledGraph capture_end(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  exec::FusedGraph& fused = exec::Executor::get().fused();
  exec::CapturedProgram program = fused.flush_captured();
  fused.set_capturing(false);
  const bool cut = !program.complete;
  CompiledGraph graph(std::move(program), inputs, outputs);
  if (cut) {
    graph.refuse("its recording was interrupted: an op read device data on the host or wrote host data "
                 "into a device tensor (e.g. an op that falls back to the CPU)");
  }
  return graph;
}

}  // namespace tpu::compile
