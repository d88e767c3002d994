// torch.compile(backend="tpu"): a captured FX graph as a callable on tensors. The capture
// (compile/capture.h) records the graph once through Fused Eager (every op's lowering from the
// one registry), compiles it into one program through the one program cache, and describes how
// the program's parameters and outputs map to the graph's input and output tensors. run() then
// executes the program directly on new inputs of the same layout - no per-op dispatch, no
// recording - writing mutated inputs back into their storages and returning new tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exec/captured_program.h"
#include "exec/op_call.h"
#include "runtime/device_storage.h"

namespace tpu::compile {

class CompiledGraph {
 public:
  CompiledGraph(exec::CapturedProgram program, const std::vector<at::Tensor>& inputs,
                const std::vector<at::Tensor>& outputs);

  // Empty when the graph cannot be replayed as captured (reason() says why).
  bool replayable() const { return reason_.empty(); }
  const std::string& reason() const { return reason_; }
  // The program holds collectives (its ranks launch it together).
  bool has_collectives() const { return program_.collectives.group != nullptr; }
  void refuse(std::string why) {
    if (reason_.empty()) reason_ = std::move(why);
  }
  // The outputs for `inputs`, or nullopt when the inputs' layout (device, dtypes, sizes,
  // strides, offsets, storage sizes and sharing) differs from the capture's.
  std::optional<std::vector<at::Tensor>> run(const std::vector<at::Tensor>& inputs) const;

 private:
  struct InputSpec {
    bool on_host = false;  // a CPU tensor (the caller matches its values; it is not a parameter)
    exec::View view;
    size_t nbytes = 0;
    int same_storage_as = -1;  // an earlier input with the same storage
  };
  struct OutputSpec {
    enum class Source { kInput, kProgram, kEmpty } source = Source::kEmpty;
    int index = -1;  // input index, or fresh storage index
    at::ScalarType dtype = at::kFloat;
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;
    size_t nbytes = 0;
    bool direct = false;  // the whole fresh storage, contiguous: its base tensor is the output
    bool same_tensor = false;  // kInput: the output is that input tensor itself
  };
  struct FreshStorage {
    int program_output = -1;
    at::ScalarType dtype = at::kByte;  // the dtype its base tensor is made with
    size_t nbytes = 0;
    bool used = false;                 // some output views it
    int users = 0;
    bool shaped = false;               // its one output is made directly (OutputSpec::direct)
  };

  bool matches(const std::vector<at::Tensor>& inputs,
               std::vector<runtime::DeviceStorage*>& storages) const;

  exec::CapturedProgram program_;
  std::vector<InputSpec> inputs_;
  std::vector<int> param_input_;                 // per program parameter; -1: a constant
  std::vector<std::vector<int>> write_back_;     // per program output: inputs it overwrites
  std::vector<FreshStorage> fresh_;
  std::vector<OutputSpec> outputs_;
  std::string reason_;
};

// Wall time replays spent waiting for queued eager launches that produce their arguments (the
// launcher thread runs those programs first); benchmarks report it apart from our host work.
uint64_t launch_wait_ns();

}  // namespace tpu::compile
