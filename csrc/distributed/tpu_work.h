// The Work of one tpu_dist collective. It completes when its output tensors hold the result (for
// the device transport: as soon as the collective program is launched, since every later use of
// the outputs is ordered after it by the device; for the host transport: once the data is back
// on the device). Its future yields the output tensors, as DDP's reducer and
// _c10d_functional.wait_tensor expect. A collective recorded into a deferred graph
// (device_backend.h) completes at once, with no device event: its outputs are pending values of
// the graph, and recording an event would launch the graph in the middle of the op stream.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <string>
#include <vector>

namespace tpu::distributed {

class TpuWork : public c10d::Work {
 public:
  TpuWork(int rank, c10d::OpType type, const char* name, c10::Device device,
          std::vector<at::Tensor> outputs, bool recorded = false);

  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override { return future_; }

  const char* name() const { return name_; }
  // Completes the work (outputs written).
  void succeed();
  // Completes the work with an error that wait() raises.
  void fail(const std::string& message);

 private:
  const char* name_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace tpu::distributed
