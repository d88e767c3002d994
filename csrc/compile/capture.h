// torch.compile(backend="tpu") capture: begin switches the deferred graph's recording on (the
// caller has put the device in Fused mode); end runs the recorded graph and returns it as a
// CompiledGraph (not replayable when the capture was cut, e.g. by an op that read data on the
// host).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "cache/fingerprint.h"
#include "compile/compiled_graph.h"

namespace tpu::compile {

// Captures on `device` (-1: the calling thread's current device); the capture belongs to the
// calling thread.
void capture_begin(bool bake, int device = -1);
// Whether the calling thread's capture has recorded a collective so far.
bool capture_holds_collectives();
CompiledGraph capture_end(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs);

// A capture's program compiling on another thread (exec/background_compiles.h).
struct BackgroundProgram {
  cache::Fingerprint fp;
  // "pending", "ready", or "failed: <why>".
  std::string state() const;
  // Blocks until it is no longer pending.
  void wait() const;
};
// Ends the capture without running it and compiles its program in the background: a later
// capture of the same computation finds it compiled. Nothing the capture wrote changes. Empty
// when the capture was cut or recorded nothing (capture it with capture_end instead).
std::optional<BackgroundProgram> capture_end_in_background();

}  // namespace tpu::compile
