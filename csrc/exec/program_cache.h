// The one program cache of the process, used as a peer by every runner: the Strict runner
// (exec/executor.h, per-op programs by call signature), the Fused graph and torch.compile's
// capture (exec/fused_graph.h, whole-graph programs by graph fingerprint), compiled-graph replay
// (csrc/compile/, which replays what the capture compiled here), collectives (per-op programs
// compiled for a replica group) and custom kernels (per-op programs whose lowering calls the
// kernel). It holds:
//   - per-op programs: signature -> OpProgram (built once, its executable compiled on first run)
//   - graph programs: fingerprint -> GraphProgram
//   - the compilation cache (cache/executable_cache.h, memory and disk tiers) behind compile()
//   - the device scalar cache and the shape-churn detector
//   - the counters every runner reports into (signature hits and misses, executions)
// No runner includes another for any of this, so executor.h and fused_graph.h stay independent.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/executable_cache.h"
#include "cache/fingerprint.h"
#include "exec/op_call.h"
#include "exec/program_builder.h"
#include "exec/scalar_cache.h"
#include "exec/shape_churn.h"
#include "pjrt/buffer.h"
#include "pjrt/client.h"
#include "pjrt/compile_options.h"
#include "pjrt/executable.h"

namespace tpu::exec {

// A built per-op program; its executable is compiled the first time it is run.
struct OpProgram {
  ProgramPlan plan;
  std::string mlir;
  std::string label;
  std::vector<int64_t> replica_devices;  // collective programs: the group's devices
  mutable std::mutex mu;
  mutable std::shared_ptr<pjrt::LoadedExecutable> exe;
};

// A compiled whole graph (Fused Eager, torch.compile capture): its executable, the run-time
// arguments after its parameters ((node, argument) of the recorded graph) and the parameters an
// output may take the buffer of.
struct GraphProgram {
  std::shared_ptr<pjrt::LoadedExecutable> exe;
  std::vector<int64_t> replica_devices;  // a graph with collectives: its group's devices
  std::vector<std::pair<int, ProgramPlan::Arg>> runtime_args;
  std::vector<int> donatable_params;
};

struct ProgramCacheStats {
  int64_t executions = 0;        // programs enqueued (per-op, fused, compiled graphs)
  int64_t donated_buffers = 0;   // argument buffers those executions took over for their outputs
  int64_t signature_hits = 0;    // per-op calls that found their program without building it
  int64_t signature_misses = 0;  // per-op calls that built a program
};

// What programs are compiled for: a client, and the text naming its plugin, version and device
// kind in compilation-cache keys.
struct CompileTarget {
  const pjrt::Client* client = nullptr;
  std::string identity;
};

class ProgramCache {
 public:
  // Asked on the first compile or scalar (the runtime is created lazily).
  using TargetSource = std::function<CompileTarget()>;

  // The process's cache, compiling for the runtime's client (runtime/runtime.h).
  static ProgramCache& get();
  explicit ProgramCache(TargetSource target, size_t max_op_programs = 2048,
                        size_t max_graph_programs = 256);

  // The per-op program of `call` with layout `layout` and signature `key` (built on a miss,
  // not compiled; a miss is counted by the shape-churn detector).
  std::shared_ptr<const OpProgram> op_program(const OpCall& call, const CallLayout& layout,
                                              const std::string& key);
  // Its executable, compiled (or loaded) on first use.
  std::shared_ptr<pjrt::LoadedExecutable> executable_of(const OpProgram& program);

  // Whole-graph programs: null when `fp` is unknown.
  std::shared_ptr<const GraphProgram> find_graph(const cache::Fingerprint& fp);
  void add_graph(const cache::Fingerprint& fp, std::shared_ptr<const GraphProgram> program);

  // Compiles (or loads from the compilation cache) a whole program; `what` names it in errors.
  // With `replica_devices`, one replica runs on each of those devices (collective programs).
  std::shared_ptr<pjrt::LoadedExecutable> compile(const std::string& mlir, const std::string& what,
                                                  const std::vector<int64_t>& replica_devices = {});
  // The same with options taken earlier (compile_options): a compile on another thread then
  // uses the settings that were active when its program was recorded.
  std::shared_ptr<pjrt::LoadedExecutable> compile(const std::string& mlir, const std::string& what,
                                                  const pjrt::CompileOptions& options);
  // The options compile() would use now: the plugin's semantics overrides and the user's
  // compilation settings (exec/compile_settings.h).
  pjrt::CompileOptions compile_options(const std::vector<int64_t>& replica_devices = {});

  // The device buffer of a host scalar on `device` (cached by value when it is cacheable).
  std::shared_ptr<pjrt::Buffer> scalar(int device, const ScalarValue& v);

  cache::ExecutableCache& executables() { return executables_; }
  ScalarCache& scalars() { return scalars_; }
  ShapeChurn& churn() { return churn_; }

  // One program enqueued, which took over (donated) `donated` of its argument buffers.
  void count_execution(int64_t donated = 0) {
    executions_.fetch_add(1, std::memory_order_relaxed);
    donated_.fetch_add(donated, std::memory_order_relaxed);
  }
  ProgramCacheStats stats() const;
  // Forgets every program (per-op and graph) and the memory tier; with `disk`, the disk tier too.
  void clear(bool disk);

 private:
  const CompileTarget& target();

  TargetSource target_source_;
  std::once_flag target_once_;
  CompileTarget target_;
  size_t max_op_programs_;
  size_t max_graph_programs_;
  cache::ExecutableCache executables_;
  ScalarCache scalars_;
  ShapeChurn churn_;
  std::string dump_dir_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const OpProgram>> op_programs_;
  std::unordered_map<cache::Fingerprint, std::shared_ptr<const GraphProgram>, cache::FingerprintHash>
      graph_programs_;
  int64_t signature_hits_ = 0;
  int64_t signature_misses_ = 0;
  std::atomic<int64_t> executions_{0};
  std::atomic<int64_t> donated_{0};
};

}  // namespace tpu::exec
