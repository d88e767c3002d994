// The executor of every eager op. Strict and Debug modes turn each OpCall into one cached
// per-op executable that is enqueued on the device (Debug also waits for it); Fused mode hands
// the call to the deferred graph (exec/fused_graph.h), which returns pending outputs. Both
// compile through the one ExecutableCache (memory and disk tiers).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/executable_cache.h"
#include "exec/execution_mode.h"
#include "exec/op_call.h"
#include "exec/program_builder.h"
#include "exec/scalar_cache.h"
#include "exec/shape_churn.h"
#include "hlo/tensor_type.h"
#include "pjrt/buffer.h"

namespace tpu::exec {

class FusedGraph;

// A new output of an op: a buffer, or (Fused mode) a value the deferred graph will compute.
struct FreshOutput {
  std::shared_ptr<pjrt::Buffer> buffer;
  hlo::TensorType type;
  int64_t pending = -1;  // the deferred graph's value id, when buffer is null
};

struct ExecutorStats {
  int64_t executions = 0;        // programs enqueued (per-op and fused)
  int64_t signature_hits = 0;    // calls that found their program without building it
  int64_t signature_misses = 0;  // calls that built a program
};

// A built per-op program; its executable is compiled the first time it is run.
struct OpProgram {
  ProgramPlan plan;
  std::string mlir;
  std::string label;
  std::vector<int64_t> replica_devices;  // collective programs: the group's devices
  mutable std::mutex mu;
  mutable std::shared_ptr<pjrt::LoadedExecutable> exe;
};

class Executor {
 public:
  static Executor& get();

  // Runs `call`. Outputs with a Target are written into their storages; the fresh ones are
  // returned in order. A call with a group (a collective) always runs as its own program,
  // launched by the group, whatever the eager mode.
  std::vector<FreshOutput> run(const OpCall& call);
  // The same for a call the caller is done with (Fused mode keeps it without a copy).
  std::vector<FreshOutput> run(OpCall&& call);
  // Gives `storage` the fresh output `out` as its contents.
  void assign(runtime::DeviceStorage& storage, FreshOutput out, const char* writer);

  // The per-op program of `call` with layout `layout` and signature `key` (built, not compiled).
  std::shared_ptr<const OpProgram> program_for(const OpCall& call, const CallLayout& layout,
                                               const std::string& key);
  // Compiles (or loads from the cache) a whole program; `what` names it in errors. With
  // `replica_devices`, one replica runs on each of those devices (collective programs).
  std::shared_ptr<pjrt::LoadedExecutable> compile(const std::string& mlir, const std::string& what,
                                                  const std::vector<int64_t>& replica_devices = {});
  // Zero-fills storages that were never written, before `call` reads them.
  void materialize(const OpCall& call, const std::vector<runtime::DeviceStorage*>& storages);

  // Forgets every compiled program (per-op and fused); with `disk`, the disk tier too.
  void clear_cache(bool disk);

  cache::ExecutableCache& executables() { return executables_; }
  ScalarCache& scalars() { return scalars_; }
  ShapeChurn& churn() { return churn_; }
  FusedGraph& fused() { return *fused_; }
  ExecutorStats stats() const;
  void count_execution();

  // Benchmarks: while recording, the executor remembers the last per-op program it ran and its
  // argument buffers; replay_last_raw re-executes it `iterations` times straight through PJRT
  // (the dispatch floor) and returns the seconds taken (all executions finished).
  void record_last(bool on) { record_last_.store(on); }
  double replay_last_raw(int iterations);

 private:
  Executor();
  std::shared_ptr<pjrt::LoadedExecutable> executable_of(const OpProgram& program);

  cache::ExecutableCache executables_;
  ScalarCache scalars_;
  ShapeChurn churn_;
  std::unique_ptr<FusedGraph> fused_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const OpProgram>> programs_;
  ExecutorStats stats_;
  std::string dump_dir_;
  struct LastRun {
    std::shared_ptr<pjrt::LoadedExecutable> exe;
    std::vector<std::shared_ptr<pjrt::Buffer>> args;
    int device = 0;
  };
  LastRun last_;
  std::atomic<bool> record_last_{false};
};

}  // namespace tpu::exec
