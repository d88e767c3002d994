#include "compile/capture.h"

#include "exec/background_compiles.h"
#include "exec/executor.h"
#include "device/current_device.h"
#include "exec/fused_graphs.h"

namespace tpu::compile {

void capture_begin(bool bake, int device) {
  exec::Executor::get().fused().begin_capture(device >= 0 ? device : device::current_device(), bake);
}

bool capture_holds_collectives() {
  const int device = exec::FusedGraphs::capture_device();
  return device >= 0 && exec::Executor::get().fused().of(device).holds_collectives();
}

CompiledGraph capture_end(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  exec::FusedGraphs& graphs = exec::Executor::get().fused();
  const int device = exec::FusedGraphs::capture_device();
  exec::CapturedProgram program = device >= 0 ? graphs.of(device).flush_captured() : exec::CapturedProgram{};
  graphs.end_capture();
  return CompiledGraph(std::move(program), inputs, outputs);
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
  exec::FusedGraphs& graphs = exec::Executor::get().fused();
  const int device = exec::FusedGraphs::capture_device();
  std::optional<cache::Fingerprint> fp =
      device >= 0 ? graphs.of(device).flush_captured_in_background() : std::nullopt;
  graphs.end_capture();
  if (!fp) return std::nullopt;
  return BackgroundProgram{*fp};
}

}  // namespace tpu::compile
