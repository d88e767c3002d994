// tpu_dist: the c10d backend of the `tpu` device. One backend name, two transports, chosen when a
// group is created (torch_tpu/distributed):
//   DeviceBackend (device_backend.cc) - every collective is an XLA program over the group's
//       devices (all_reduce, all_gather, reduce_scatter, all_to_all, collective_permute),
//       launched by each rank on its own device: how TPUs (ICI) and GPUs (NCCL inside XLA) run
//       them. On the XLA CPU plugin this needs the ranks in one process.
//   HostBackend (host_backend.cc) - device -> host -> Gloo -> device, for processes whose
//       plugin cannot run collectives across them (the XLA CPU plugin).
// This base holds what both share: the checks on a collective's tensors and the common c10d
// plumbing (name, timeout, the reduce operation).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "distributed/tpu_work.h"
#include "lowering/collectives.h"

namespace tpu::distributed {

// A c10d reduce operation as a collective program computes it.
struct Reduction {
  lowering::CollectiveCombine combine = lowering::CollectiveCombine::kSum;
  bool mean = false;                    // AVG: the sum divided by the group size
  std::optional<at::Tensor> premul;     // PREMUL_SUM: the factor (a 0-dim tensor)
  std::string name;                     // "SUM", "AVG", ...
};

class TpuBackend : public c10d::Backend {
 public:
  TpuBackend(int rank, int size, std::chrono::milliseconds timeout);

  const std::string getBackendName() const override { return "tpu_dist"; }
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
  // "device" or "host".
  virtual const char* transport() const = 0;

  // Forms of collectives the transports implement once (allreduce, allgather,
  // allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced).
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;

 protected:
  // Every tensor must be a tpu tensor with a dtype the device supports; `what` names the
  // collective in the error. Returns their common device.
  c10::Device check_tensors(const std::vector<at::Tensor>& tensors, const char* what) const;
  c10::Device check_tensors(const std::vector<std::vector<at::Tensor>>& lists, const char* what) const;
  // The reduce operation, or a clear error for one tpu_dist cannot apply to `dtype`.
  Reduction reduction(const c10d::ReduceOp& op, at::ScalarType dtype, const char* what) const;
  // "tpu_dist all_reduce on rank 0 of 2 (device transport)": the prefix of every error.
  std::string where(const char* what) const;
  // A root rank of the group.
  int check_root(int64_t root, const char* what) const;
  // outputs[i] holds one copy of inputs[i] per rank (all_gather_into_tensor).
  void check_gathered(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                      const char* what) const;
  // inputs[i] holds one part of the size of outputs[i] per rank (reduce_scatter_tensor).
  void check_scattered(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                       const char* what) const;

  std::chrono::milliseconds timeout_;
};

// A dense tensor with `t`'s values whose storage is one buffer of exactly its shape (`t` itself
// when it is): what a collective program reads, identical in layout on every rank.
at::Tensor dense(const at::Tensor& t);
// "float32[4, 2]"
std::string describe(const at::Tensor& t);

}  // namespace tpu::distributed
