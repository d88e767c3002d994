#include "distributed/tpu_work.h"

#include <ATen/core/ivalue.h>

#include <stdexcept>

namespace tpu::distributed {

TpuWork::TpuWork(int rank, c10d::OpType type, const char* name, c10::Device device,
                 std::vector<at::Tensor> outputs, bool recorded)
    : c10d::Work(rank, type), name_(name), outputs_(std::move(outputs)) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()),
      recorded ? std::vector<c10::Device>{} : std::vector<c10::Device>{device});
}

void TpuWork::succeed() {
  finish();
  future_->markCompleted(c10::IValue(outputs_));
}

void TpuWork::fail(const std::string& message) {
  auto error = std::make_exception_ptr(std::runtime_error(message));
  finish(error);
  future_->setError(error);
}

}  // namespace tpu::distributed
