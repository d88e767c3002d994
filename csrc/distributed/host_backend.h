// The host transport of tpu_dist: device -> host -> Gloo -> device, for ranks in separate
// processes whose plugin cannot run collectives across them (the XLA CPU plugin). The Gloo
// process group is created in Python and handed over (its C++ headers do not ship with torch).
//
// A call returns at once: it snapshots its tpu inputs (immutable buffers, so a whole tensor costs
// nothing) and queues a job. The issue thread copies the inputs to the host - waiting for the
// device there, not in the caller, so the caller goes on computing (DDP's next buckets, FSDP2's
// prefetch) - and hands the collective to Gloo, in call order on every rank. The completion thread
// waits for Gloo, copies the results into the tpu outputs and completes the work. Gloo lacks AVG
// and PREMUL_SUM: they are a SUM with the division or the factor applied on the host.
//
// Before each collective (point-to-point excepted) the ranks all-gather a short signature of it
// (kind, dtype, sizes, root, operation) and send the data only if they agree, so a size or dtype
// mismatch is a clear error on every rank - and the group stays usable - instead of a wrong result,
// a hang or Gloo aborting the process (TORCH_TPU_DIST_CHECK=0 turns it off). The exchange is issued
// before the wait for the device, so its round trip mostly overlaps it. A failed collective names
// the ranks that are gone (peers on this host whose process ended, or that reported an error
// through the store).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "distributed/tpu_backend.h"

namespace tpu::distributed {

class HostBackend : public TpuBackend {
 public:
  // `store`: the world store; `global_ranks`: the world rank of each rank of the group.
  HostBackend(int rank, int size, std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Backend> gloo,
              c10::intrusive_ptr<c10d::Store> store, std::vector<int64_t> global_ranks, bool check);
  ~HostBackend() override;
  const char* transport() const override { return "host"; }

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
  void setTimeout(std::chrono::milliseconds timeout) override;

  // Seconds the issue and completion threads spent waiting for the device to compute the inputs,
  // in host copies and in Gloo (benchmarks).
  struct Timings {
    double waiting_for_device = 0, to_host = 0, gloo = 0, to_device = 0;
    int64_t jobs = 0;
  };
  Timings timings() const;

 private:
  using Works = std::vector<c10::intrusive_ptr<c10d::Work>>;

  // One collective on its way through the two threads.
  struct Job {
    const char* what = "";
    std::vector<at::Tensor> device_inputs;  // snapshots of the tpu inputs
    std::vector<at::Tensor> host;           // their host copies (filled by the issue thread)
    std::vector<int64_t> signature;         // empty: not checked (point-to-point)
    // Issues the Gloo collective(s) on the host tensors.
    std::function<std::vector<c10::intrusive_ptr<c10d::Work>>(c10d::Backend& gloo, Job&)> issue;
    // After Gloo: writes the results into the tpu outputs.
    std::function<void(Job&)> finish;
    c10::intrusive_ptr<TpuWork> work;
    // Filled by the issue thread.
    std::vector<c10::intrusive_ptr<c10d::Work>> gloo_works;
    std::string mismatch;  // the ranks disagree on the collective (nothing was sent)
    std::string error;
  };
  struct State;

  // Queues `job` for the collective `what` whose future yields `outputs`.
  c10::intrusive_ptr<c10d::Work> submit(const char* what, c10d::OpType type, std::vector<at::Tensor> outputs,
                                        std::unique_ptr<Job> job);
  // The job's signature: kind, dtype, sizes and whatever else every rank must agree on.
  std::vector<int64_t> signature(const char* what, const std::vector<at::Tensor>& ts,
                                 std::vector<int64_t> extra) const;
  c10::Device device_of(const std::vector<at::Tensor>& ts) const { return ts.front().device(); }

  std::shared_ptr<State> state_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<TpuWork>> coalesced_;
};

}  // namespace tpu::distributed
