// Builds an exec::OpCall from tensors and runs it: the common path of every tpu kernel.
//
//   at::Tensor out = OpRunner("add", "aten::add.Tensor")
//                        .input(self, compute).input(other, compute).run1();
//
// A CPU 0-dim tensor (a Python number PyTorch wrapped, or a scalar tensor) becomes a runtime
// scalar argument. All tpu inputs must be on one device.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "exec/op_call.h"
#include "lowering/attrs.h"
#include "profiler/trace_hooks.h"

namespace tpu::aten {

// `s` as a runtime scalar of real element type `et` (what OpRunner::scalar passes to a lowering).
exec::ScalarValue scalar_value(const at::Scalar& s, ElementType et);

class OpRunner {
 public:
  OpRunner(const char* lowering, const char* label);

  // A tensor input converted to `compute` before the lowering sees it.
  OpRunner& input(const at::Tensor& t, at::ScalarType compute);
  OpRunner& input(const at::Tensor& t) { return input(t, t.scalar_type()); }
  OpRunner& scalar(const at::Scalar& s, at::ScalarType dtype);
  OpRunner& scalar_u64(uint64_t v, bool cacheable);
  lowering::Attrs& attrs() { return call_.attrs; }
  // Sets the device when no tpu tensor input determines it.
  OpRunner& on_device(int device);
  // A collective program: runs over the group's devices (exec/replica_group.h).
  OpRunner& over(const exec::ReplicaGroup* group) {
    call_.group = group;
    return *this;
  }

  // Runs with every output fresh; returns them as new tensors. A runner runs once (its call is
  // handed over to the executor): run, run_into and run_mixed end its use.
  std::vector<at::Tensor> run(size_t num_outputs);
  at::Tensor run1() { return run(1)[0]; }
  // Runs with output i written into targets[i] (converted to its dtype; shapes must match).
  void run_into(const std::vector<at::Tensor>& targets);
  void run_into(const at::Tensor& target) { run_into(std::vector<at::Tensor>{target}); }
  // Output i goes into targets[i] when given, else it is returned (fresh, in order).
  std::vector<at::Tensor> run_mixed(const std::vector<std::optional<at::Tensor>>& targets);

 private:
  void note_device(const at::Tensor& t);
  void start_run();
  // Hands the call to the executor and wraps the fresh outputs as tensors.
  std::vector<at::Tensor> execute();
  // While profiling with host spans: the runner's life, from the kernel building its call to the
  // output tensors (its executor span nests inside).
  profiler::HostSpan span_{"kernel"};
  exec::OpCall call_;
  bool ran_ = false;
  bool widened_ = false;  // a complex32 input computes as complex64: so do its fresh outputs
  int device_ = -1;
  std::vector<at::Tensor> keep_alive_;
};

}  // namespace tpu::aten
