#include "compile/capture.h"

#include "exec/background_compiles.h"
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

std::string BackgroundProgram::state() const {
  std::string error;
  switch (exec::BackgroundCompiles::get().state(fp, &error)) {
    case exec::BackgroundState::kPending:
      return "pending";
    case exec::BackgroundState::kReady:
      return "ready";
    case exec::BackgroundState::kFailed:
      return "failed: " + error;
    case exec::BackgroundState::kUnknown:
      break;
  }
  return "failed: no such background compile";
}

void BackgroundProgram::wait() const { exec::BackgroundCompiles::get().wait(fp); }

std::optional<BackgroundProgram> capture_end_in_background() {
  exec::FusedGraph& fused = exec::Executor::get().fused();
  std::optional<cache::Fingerprint> fp = fused.flush_captured_in_background();
  fused.set_capturing(false);
  if (!fp) return std::nullopt;
  return BackgroundProgram{*fp};
}

}  // namespace tpu::compile
