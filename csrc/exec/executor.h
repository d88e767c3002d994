// The executor of every eager op: the Strict runner. Strict and Debug modes turn each OpCall into
// one cached per-op executable that is enqueued on the device (Debug also waits for it); Fused
// mode hands the call to the deferred graph (exec/fused_graph.h), which returns pending outputs.
// Both get their programs from the one ProgramCache (exec/program_cache.h) as peers; the
// deferred graph never calls back into the executor.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec/execution_mode.h"
#include "exec/fresh_output.h"
#include "exec/op_call.h"
#include "exec/program_cache.h"
#include "pjrt/buffer.h"
#include "pjrt/executable.h"

namespace tpu::exec {

class FusedGraphs;

class Executor {
 public:
  static Executor& get();

  // Runs `call`. Outputs with a Target are written into their storages; the fresh ones are
  // returned in order. A call with a group (a collective) runs as its own program, launched by
  // the group - except in Fused mode where the thread records collectives (exec/fused_graphs.h).
  std::vector<FreshOutput> run(const OpCall& call);
  // The same for a call the caller is done with (Fused mode keeps it without a copy).
  std::vector<FreshOutput> run(OpCall&& call);
  // Gives `storage` the fresh output `out` as its contents.
  void assign(runtime::DeviceStorage& storage, FreshOutput out, const char* writer);

  // Zero-fills storages that were never written, before `call` reads them.
  void materialize(const OpCall& call, const std::vector<runtime::DeviceStorage*>& storages);

  // The deferred graphs, one per device.
  FusedGraphs& fused() { return *fused_; }

  // Benchmarks: while recording, the executor remembers the last per-op program it ran and its
  // argument buffers; replay_last_raw re-executes it `iterations` times straight through PJRT
  // (the dispatch floor) and returns the seconds taken (all executions finished).
  void record_last(bool on) { record_last_.store(on); }
  double replay_last_raw(int iterations);

 private:
  Executor();
  // Runs `call` as its own program (Strict and Debug mode, and Fused ops the graph diverts).
  std::vector<FreshOutput> launch(const OpCall& call, EagerMode mode);

  ProgramCache& programs_;
  std::unique_ptr<FusedGraphs> fused_;
  std::mutex mu_;
  struct LastRun {
    std::shared_ptr<pjrt::LoadedExecutable> exe;
    std::vector<std::shared_ptr<pjrt::Buffer>> args;
    int device = 0;
  };
  LastRun last_;
  std::atomic<bool> record_last_{false};
};

}  // namespace tpu::exec
