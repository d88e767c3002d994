// Fused Eager: the deferred graph. In Fused mode an op is not run; it is recorded here, and
// its outputs are *pending* values (their storages are marked pending). At a materialisation
// point - a host read of a pending storage, a synchronize or event, a mode switch, the size
// limit, or the start of a repeat of the recorded op sequence - the whole graph is emitted with
// the same per-op code as Strict mode (exec/program_builder.h emit_call) into one StableHLO
// module, compiled once per graph signature (a GraphProgram of the one ProgramCache,
// exec/program_cache.h, which the Strict runner uses as a peer) and run.
//
// Graph inputs are the buffers of the storages the ops read; outputs are the newest values of
// the storages still alive (temporaries that died are never materialised). A storage that is
// read and then overwritten has its buffer donated to its new value.
//
// A flush for a host read of one storage (flush_for) runs the graph as two programs when the
// rest is big enough: the read value's dependencies, then everything else right behind it
// (exec/graph_split.h), so the read waits only for the first while the rest overlaps with the
// recording of the next step.
//
// There is one graph per device (exec/fused_graphs.h). A graph may hold the collectives of one
// replica group (exec/replica_group.h), recorded where every rank has promised the same op
// stream: it is then compiled as a replicated program and launched through the group.
//
//   TORCH_TPU_FUSE_MAX_OPS=N  - flush when a graph reaches N ops (default 5000); the next graph
//                               continues the same iteration (see record)
//   TORCH_TPU_FUSE_SPLIT_READS=0 - never split a flush at a host read
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/fingerprint.h"
#include "exec/captured_program.h"
#include "exec/fresh_output.h"
#include "exec/fuse_advisor.h"
#include "exec/graph_split.h"
#include "exec/op_call.h"
#include "exec/program_builder.h"
#include "exec/program_cache.h"
#include "exec/replica_group.h"
#include "pjrt/executable.h"
#include "runtime/device_storage.h"
#include "runtime/pending_work.h"

namespace tpu::exec {

struct FusedStats {
  int64_t ops_recorded = 0;
  int64_t graphs_run = 0;       // flushes that executed a graph (a split one counts once)
  int64_t graph_compiles = 0;   // graph programs built and compiled (or loaded from disk)
  int64_t graph_replays = 0;    // flushes whose program(s) were already known
  int64_t flushes_by_repeat = 0;
  int64_t flushes_by_size = 0;
  int64_t split_reads = 0;      // flushes for a host read run as two programs (graph_split.h)
  int64_t collectives_recorded = 0;  // collectives recorded into graphs (exec/replica_group.h)
  int64_t graphs_with_collectives = 0;  // graphs run as replicated programs with collectives
  int64_t patterns_timed = 0;    // iteration patterns timed fused against strict (fuse_advisor.h)
  int64_t patterns_strict = 0;   // ... found faster op by op, and run so
  int64_t patterns_pending = 0;  // ... on their way to a verdict (a gauge)
  int64_t ops_run_strictly = 0;  // Fused-mode ops run in Strict mode for those (and for trials)

  FusedStats& operator+=(const FusedStats& o);
};

class FusedGraph : public runtime::PendingWork {
 public:
  FusedGraph();
  ~FusedGraph() override;

  // Whether `call`, an op the Fused mode would record, runs in Strict mode instead: the fuse
  // advisor (exec/fuse_advisor.h) times the iterations of a loop both ways and runs strictly
  // those that are faster so. Never inside a capture or with collectives (`owned`: see record).
  bool diverts(const OpCall& call, bool owned = false);
  // Starts the advisor afresh with FuseAdvisor::defaults() (what it learnt is forgotten).
  void reset_advisor();
  // Records `call` (kept in the graph: pass it by move when the caller is done with it); fresh
  // outputs come back pending (bind them to their storages). With `owned` (the calling thread
  // is a rank inside spmd_safe), the graph becomes the thread's, as it does when it records a
  // collective or captures: only that thread flushes it whole (flush_unless_foreign), so another
  // thread never cuts a rank's graph at a point the other ranks do not cut theirs.
  std::vector<FreshOutput> record(OpCall call, bool owned = false);
  // `storage` now holds the pending value `value`.
  void bind(runtime::DeviceStorage* storage, int64_t value);

  void flush() override;
  // flush(), except when the graph belongs to another thread (see record; a graph with
  // collectives only its rank's thread may launch: exec/fused_graphs.h).
  void flush_unless_foreign();
  // A flush because `storage`'s contents are needed now: may split the graph at that value.
  void flush_for(const runtime::DeviceStorage* storage) override;
  void forget(runtime::DeviceStorage* storage, bool destroyed) override;
  // While capturing, a host read of device data cuts the capture (its value would be baked in).
  void host_read() override;

  // torch.compile capture: while on, the graph is cut only by a change of device (never by a
  // repeat or the size limit), so one FX graph records into one program. With `bake`, view
  // offsets and fixed scalars become constants of the program (part of its key) instead of
  // run-time arguments, so XLA sees static slices and can fold them; a program that is
  // replayed for inputs of one layout loses nothing by it.
  void set_capturing(bool on, bool bake = false);
  bool capturing() const;
  // The capture does not stand for the whole computation (the thread ran ops elsewhere, or a
  // collective outside the graph); `why`, when given, is what the refused replay says (the
  // first reason given wins).
  void cut_capture(const std::string& why = {});
  // Runs the recorded graph like flush() and describes it for replay (empty when nothing was
  // recorded).
  CapturedProgram flush_captured();
  // Ends a capture without running it: the recorded graph's program is described here and
  // compiled on BackgroundCompiles' thread into the program cache (nothing is queued when the
  // cache knows it), so a later capture of the same computation finds it compiled. The graph
  // is dropped: the storages it wrote keep the contents they had before the capture. Returns
  // the program's fingerprint, or nullopt when nothing was recorded or the capture was cut
  // (part of it ran; capture it with flush_captured instead).
  std::optional<cache::Fingerprint> flush_captured_in_background();

  FusedStats stats() const;
  size_t pending_ops() const;
  // The graph holds a collective (its flush launches through the group).
  bool holds_collectives() const;

 private:
  struct Value {
    hlo::TensorType type;
    int param = -1;  // graph input index, or -1 for a node output
  };
  struct Param {
    std::shared_ptr<pjrt::Buffer> buffer;
    runtime::DeviceStorage* storage;
    int value;
  };
  struct Node {
    OpCall call;
    CallLayout layout;
    NodeValues slot_values;
    NodeValues out_values;
  };
  // What identifies an op for the repeat detector: its op, attributes and view shapes, and
  // per tensor input the storage and whether it is new to the graph. A later op repeats the
  // graph's first op when both agree and each input is the same storage or, in both, a
  // storage new to the graph (the next batch of data).
  struct OpMark {
    std::string light;
    std::vector<runtime::DeviceStorage*> inputs;
    std::vector<bool> is_new;
    bool repeats(const OpMark& first) const;
    bool is_op(const std::string& op) const;  // cheap first check: the same lowering
  };

  OpMark mark_of(const OpCall& call) const;
  // Flushes the graph when `call` repeats its first op (the start of the next iteration).
  void cut_at_repeat_locked(const OpCall& call);
  CallLayout::Slot slot_of(runtime::DeviceStorage* s);
  int new_value(hlo::TensorType type, int param);
  // `read_value`: the value a host read needs now (>= 0 allows a split), or -1.
  void flush_locked(CapturedProgram* captured = nullptr, int read_value = -1);
  // The program of `part` of the graph before compiling: its StableHLO text and its name in
  // messages (`kind` names the part).
  struct GraphSource {
    std::shared_ptr<GraphProgram> program;  // all but the executable
    std::string mlir;
    std::string what;
  };
  GraphSource describe_locked(const GraphPart& part, const std::string& kind);
  // Builds and compiles the program of `part` of the graph.
  std::shared_ptr<const GraphProgram> build_locked(const GraphPart& part, const std::string& kind);
  // Completes key_ with the parameters and outputs: `live` gets (value, storage) of every value
  // to materialise (storage null for an unbound fresh output), `outputs` the distinct values,
  // `aliases` per output the parameter whose buffer it may take, or -1.
  void finish_key_locked(std::vector<std::pair<int, runtime::DeviceStorage*>>& live,
                         std::vector<int>& outputs, std::vector<int>& aliases);
  // The whole graph as one part with those outputs and aliases.
  GraphPart whole_locked(std::vector<int> outputs, std::vector<int> aliases) const;
  // The cached program of `part` under fingerprint `fp`, built (and *compiled set) on a miss.
  std::shared_ptr<const GraphProgram> program_locked(const cache::Fingerprint& fp, const GraphPart& part,
                                                     const std::string& kind, bool* compiled);
  // Runs `program` of `part`: parameters from `buffers` (per value id; a value no later part
  // reads is moved out), run-time scalars from the recorded calls. Returns the outputs.
  std::vector<std::shared_ptr<pjrt::Buffer>> run_part_locked(
      const GraphProgram& program, const GraphPart& part,
      std::vector<std::shared_ptr<pjrt::Buffer>>& buffers, const std::vector<bool>& keep,
      const GroupLaunch& collectives);
  void reset_locked();

  ProgramCache& programs_;
  mutable std::recursive_mutex mu_;
  size_t max_ops_;
  // Atomic: copies ask capturing() on every tpu-to-tpu copy, without taking the graph's lock.
  std::atomic<bool> capturing_{false};
  bool bake_ = false;
  // The capture was cut (a flush) or a storage it tracks was written from outside it (an
  // upload): the program does not stand for the whole captured computation.
  bool capture_cut_ = false;
  std::string capture_cut_why_;
  int device_ = -1;
  std::vector<Value> values_;
  std::vector<Param> params_;
  // Live storages read as parameters (a destroyed storage's entry is dropped and its Param's
  // storage nulled, so a new storage at the same address is never taken for it).
  std::unordered_map<runtime::DeviceStorage*, int> param_of_;
  std::vector<Node> nodes_;
  struct Tracked {
    int value;
    bool pending;
  };
  std::unordered_map<runtime::DeviceStorage*, Tracked> tracked_;
  // Fresh outputs handed out but not yet bound to a storage; if a flush (from another thread)
  // comes first they are outputs too, and their buffers wait in orphans_ for the bind.
  std::vector<int> unbound_;
  std::unordered_map<int64_t, std::pair<std::shared_ptr<pjrt::Buffer>, hlo::TensorType>> orphans_;
  int64_t generation_ = 0;
  std::string key_;  // signature of the graph so far
  std::string sig_;  // the op being recorded's signature (a buffer kept for its capacity)
  OpMark first_;  // the first op of the current iteration (see record)
  bool continuing_ = false;  // the graph continues an iteration cut by the size limit
  // The fuse advisor, off for good once the graph meets a collective or an spmd_safe region.
  FuseAdvisor advisor_;
  std::atomic<bool> advise_{FuseAdvisor::enabled_by_env()};
  bool strict_ = false;            // in a strict stretch
  int64_t strict_marks_left_ = 0;  // ... ops with the candidate's mark still to run strictly
  int64_t strict_ops_left_ = 0;    // ... and a cap on its ops
  std::string candidate_op_;       // the op of the advisor's candidate iteration start
  // The advisor's word for `call`'s op mark (op, attributes, view shapes).
  uint64_t mark_hash(const OpCall& call) const;
  // Whether `call` looks like the advisor's candidate for an iteration's first op.
  bool is_candidate(const OpCall& call) const;
  // Read without the graph's lock: a stats read never waits for a flush in progress (whose
  // ranks may be meeting).
  void count(int64_t FusedStats::*field);
  mutable std::mutex stats_mu_;
  FusedStats stats_;
  std::atomic<size_t> pending_ops_{0};
  // The group of the collectives recorded into this graph (one group per graph: a collective
  // of another group starts a new graph).
  std::shared_ptr<const ReplicaGroup> group_;
  // The thread the graph belongs to (see record), or none. Also read without the lock: a flush
  // from another thread skips such a graph without waiting for its lock, which the owner holds
  // while its ranks meet.
  std::atomic<std::thread::id> owner_{};
};

}  // namespace tpu::exec
