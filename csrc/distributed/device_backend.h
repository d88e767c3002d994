// The device transport of tpu_dist: each collective is one XLA program compiled for the group's
// devices (one replica per rank, lowering/collectives.cc), cached in the one compilation cache,
// and launched by every rank on its own device. Rank-specific work around it (making inputs
// dense, padding uneven all_to_all chunks, writing results into views) is ordinary tpu ops.
//
// Every rank's part of a collective must be launched, or none: a part launched alone waits
// inside the plugin (XLA:CPU aborts the process after 40 s). So the ranks meet (runtime/
// rendezvous.h) right before launching - comparing what each is about to run, so a size or dtype
// mismatch is a clear error on every rank instead of a hang - and right after, so no rank runs
// more than one collective ahead. A rank that fails before launching abandons the group and the
// others fail at once, naming it. On the XLA CPU plugin every rank of the group lives in this
// process (threads, one device each) and meets in memory; with a plugin whose collectives span
// processes, ranks in other processes meet through the store.
//
// Where every rank has promised the same op stream - inside torch.tpu.distributed.spmd_safe in
// Fused Eager, or while torch.compile captures a graph - a collective whose work is the same on
// every rank (all_reduce, all_gather, reduce_scatter, broadcast, an even all_to_all) is not
// launched: it is recorded into the device's deferred graph (exec/fused_graphs.h), which then runs
// as one replicated program with StableHLO collectives, launched through the group with one pair
// of meets comparing the program's fingerprint. Collectives whose work differs per rank (a root's
// result: reduce, gather, scatter; uneven all_to_all; send/recv) always run as their own
// programs.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "distributed/tpu_backend.h"
#include "exec/replica_group.h"
#include "runtime/rendezvous.h"

namespace tpu::distributed {

class DeviceBackend : public TpuBackend {
 public:
  // Where the ranks of a group (named by a token) meet: in this process, or through the store.
  using RendezvousFactory = std::function<std::shared_ptr<runtime::Rendezvous>(const std::string& token, int size)>;

  // `devices`: global PJRT device ids of the group's ranks; `token` names the group (the same on
  // all its ranks).
  DeviceBackend(int rank, int size, std::chrono::milliseconds timeout, int device,
                std::vector<int64_t> devices, std::string token, RendezvousFactory rendezvous);
  ~DeviceBackend() override;
  const char* transport() const override { return "device"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void shutdown() override;
  void abort() override;
  // This rank will not take part any more: every waiting and later collective of its groups fails
  // at once on the other ranks, with `why` (e.g. "raised ValueError: ...") in their error.
  void abandon(const std::string& why);

  // Runs `body`: an op `label` on `inputs` (this rank's tensors) whose program holds collectives
  // over the group's ranks (a kernel over a mesh of the ranks, torch_tpu.kernels.jax_op(mesh=...)),
  // handed the group to run them over. Like a collective whose work is the same on every rank:
  // recorded into the deferred graph where the thread records collectives, else launched as a
  // program of its own through the group (the ranks compare label and inputs first). Returns what
  // `body` returns.
  std::vector<at::Tensor> run_over_group(
      const std::string& label, const std::vector<at::Tensor>& inputs,
      const std::function<std::vector<at::Tensor>(const exec::ReplicaGroup&)>& body);

  // Collectives run on the device transport by the ranks of tpu:`device` so far: launched as
  // programs of their own, and recorded into deferred graphs.
  struct Counts {
    int64_t launched = 0;
    int64_t recorded = 0;
  };
  static Counts counts(int device);

 private:
  // The devices one collective program runs on, launching this rank's part between the meets.
  class Group final : public exec::ReplicaGroup {
   public:
    Group(DeviceBackend& owner, std::shared_ptr<runtime::Rendezvous> rendezvous, int rank,
          std::vector<int64_t> devices)
        : owner_(owner), rendezvous_(std::move(rendezvous)), rank_(rank), devices_(std::move(devices)) {}
    const std::vector<int64_t>& devices() const override { return devices_; }
    // An eager collective's part, after the programs queued by launch_program.
    void launch(runtime::Launch launch) const override;
    // Queued on the device's group launcher (runtime/group_launcher.h); returns at once.
    void launch_program(runtime::Launch launch, const std::string& signature) const override;
    bool closed() const override { return closed_.load(std::memory_order_acquire); }
    void close() { closed_.store(true, std::memory_order_release); }
    runtime::Rendezvous& rendezvous() const { return *rendezvous_; }
    int rank() const { return rank_; }

    // Set by the backend for the collective in flight.
    mutable uint64_t round = 0;
    mutable std::string signature;
    mutable const char* what = "";
    uint64_t launch_salt_ = 0;  // from the group's token: launch ids differ between groups
    std::atomic<bool> closed_{false};  // the backend left the group (owner_ may be gone)

   private:
    // What one launch meets with, fixed when it is handed over.
    struct Part {
      uint64_t round = 0;
      std::string signature;
      const char* what = "";
      std::string where;
      std::chrono::milliseconds timeout{0};
      bool program = false;
    };
    Part meet_plan(uint64_t round, std::string signature, const char* what, bool program) const;
    // Awaits the device's previous collective, meets, launches, meets again.
    void launch_part(runtime::Launch& launch, const Part& p) const;

    DeviceBackend& owner_;
    std::shared_ptr<runtime::Rendezvous> rendezvous_;
    int rank_;
    std::vector<int64_t> devices_;
  };
  struct PendingP2P {
    bool send;
    int peer;
    at::Tensor tensor;
    c10::intrusive_ptr<TpuWork> work;  // what isend/irecv returned
  };

  // Meetings per collective: ready (before launching) and launched.
  static constexpr uint64_t kMeetsPerCollective = 2;

  // Runs one collective over `group`: `body` builds and runs its program (the group launches it)
  // and writes the outputs. Returns its (completed) work, whose future yields `outputs`. With
  // `same_on_every_rank` (the body's ops do not depend on the rank), the collective is recorded
  // into the deferred graph where the thread records collectives (see the top of this file).
  c10::intrusive_ptr<c10d::Work> collective(const Group& group, const char* what, c10d::OpType type,
                                            std::string signature, std::vector<at::Tensor> outputs,
                                            const std::function<void()>& body, bool same_on_every_rank = false);
  // A meeting of all ranks of `group` (payloads in rank order).
  std::vector<std::string> meet(const Group& group, uint64_t round, std::string payload, const char* what);
  // The pair group of this rank and `peer` for point-to-point transfers, sender first.
  Group& pair(int src, int dst);
  c10::intrusive_ptr<c10d::Work> transfer(const at::Tensor& tensor, int src, int dst);
  // all_to_all of flat pieces: inputs[j] goes to rank j, outputs[i] arrives from rank i.
  c10::intrusive_ptr<c10d::Work> exchange(const char* what, c10d::OpType type,
                                          std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs,
                                          std::vector<at::Tensor> work_outputs);
  void check_device(c10::Device d, const char* what) const;

  const int device_;
  const std::string token_;
  RendezvousFactory make_rendezvous_;
  std::shared_ptr<Group> group_;  // shared: recorded graphs and compiled programs keep it
  std::map<std::pair<int, int>, std::shared_ptr<Group>> pairs_;
  std::map<std::pair<int, int>, uint64_t> pair_rounds_;
  uint64_t seq_ = 0;
  std::recursive_mutex mu_;  // one collective at a time per rank
  bool coalescing_ = false;
  std::vector<PendingP2P> pending_p2p_;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
};

}  // namespace tpu::distributed
