#include "aten/op_runner.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "aten/complex_support.h"
#include "aten/tensor_access.h"
#include "exec/executor.h"

namespace tpu::aten {

OpRunner::OpRunner(const char* lowering, const char* label) {
  call_.op = lowering;
  call_.label = label;
  call_.inputs.reserve(4);
  call_.outputs.reserve(2);
  keep_alive_.reserve(4);
}

void OpRunner::note_device(const at::Tensor& t) {
  const int d = tpu_index(t);
  if (device_ < 0) {
    device_ = d;
  } else {
    TORCH_CHECK(d == device_, "Expected all tensors to be on the same device, but found at least "
                "two devices, tpu:", device_, " and tpu:", d, "! (in ", call_.label, ")");
  }
}

OpRunner& OpRunner::on_device(int device) {
  device_ = device;
  return *this;
}

OpRunner& OpRunner::input(const at::Tensor& t, at::ScalarType compute) {
  if (!t.is_privateuseone()) {
    TORCH_CHECK(t.dim() == 0 && t.is_cpu(),
                "Expected all tensors to be on the same device, but found at least two devices, ",
                t.device(), " and tpu! (in ", call_.label, "). Fix: move the tensor with .to('tpu')");
    return scalar(t.item(), compute);
  }
  // PyTorch lets the lazy conjugate/negative bits through to matmul-like kernels: materialise.
  if (t.is_conj() || t.is_neg()) return input(t.resolve_conj().resolve_neg(), compute);
  note_device(t);
  ElementType ce = element_type(compute);
  if (ce == ElementType::kC32 && !lowering_moves_bits(call_.op)) {  // computes widened
    ce = ElementType::kC64;
    widened_ = true;
  }
  call_.inputs.push_back(exec::Input::tensor(&storage(t), view_of(t), ce));
  keep_alive_.push_back(t);
  return *this;
}

OpRunner& OpRunner::scalar(const at::Scalar& s, at::ScalarType dtype) {
  if (dtype == at::kComplexHalf) dtype = at::kComplexFloat;  // complex32 computes as complex64
  const ElementType et = element_type(dtype);
  if (is_complex(et)) {  // runtime scalars are real: a complex one travels as a 0-dim tensor
    const int d = device_ >= 0 ? device_ : static_cast<int>(c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index());
    return input(at::scalar_tensor(s, at::TensorOptions().dtype(dtype)).to(at::Device(c10::DeviceType::PrivateUse1, d)), dtype);
  }
  call_.inputs.push_back(exec::Input::of_scalar(scalar_value(s, et)));
  return *this;
}

exec::ScalarValue scalar_value(const at::Scalar& s, ElementType et) {
  if (is_floating(et)) return exec::ScalarValue::floating(et, s.toDouble());
  if (et == ElementType::kBool) return exec::ScalarValue::integral(et, s.toBool() ? 1 : 0);
  if (s.isFloatingPoint()) return exec::ScalarValue::integral(et, static_cast<int64_t>(s.toDouble()));
  return exec::ScalarValue::integral(et, s.toLong());
}

OpRunner& OpRunner::scalar_u64(uint64_t value, bool cacheable) {
  exec::ScalarValue v = exec::ScalarValue::integral(ElementType::kU64, static_cast<int64_t>(value));
  v.cacheable = cacheable;
  call_.inputs.push_back(exec::Input::of_scalar(v));
  return *this;
}

namespace {
// Lowerings written for real types must not see complex values (see complex_support.h).
void check_complex_support(const exec::OpCall& call_) {
  bool complex = false;
  for (const auto& in : call_.inputs) {
    complex |= in.kind == exec::Input::Kind::kTensor && (is_complex(in.view.dtype) || is_complex(in.compute));
  }
  for (const auto& out : call_.outputs) {
    complex |= out.has_value() && (is_complex(out->view.dtype) || out->view.dtype == ElementType::kC32);
  }
  if (complex && lowering_moves_bits(call_.op)) return;
  TORCH_CHECK_NOT_IMPLEMENTED(!complex || lowering_supports_complex(call_.op, call_.attrs), call_.label,
                              " does not support complex tensors on tpu yet. Fix: compute it on the CPU "
                              "(t.cpu()) or on real and imaginary parts (torch.view_as_real).");
}
}  // namespace

void OpRunner::start_run() {
  TORCH_INTERNAL_ASSERT(!ran_, call_.label, ": an OpRunner runs once");
  ran_ = true;
}

std::vector<at::Tensor> OpRunner::run(size_t num_outputs) {
  start_run();
  TORCH_INTERNAL_ASSERT(device_ >= 0, call_.label, ": no device for the op");
  call_.device = device_;
  call_.outputs.assign(num_outputs, std::nullopt);
  return execute();
}

std::vector<at::Tensor> OpRunner::execute() {
  const char* label = call_.label;
  check_complex_support(call_);
  auto fresh = exec::Executor::get().run(std::move(call_));  // a runner runs once
  std::vector<at::Tensor> out;
  out.reserve(fresh.size());
  for (auto& f : fresh) out.push_back(wrap(std::move(f), device_, label));
  if (widened_) {  // results the op gives as complex32 (or float16 parts) were computed widened: narrow them
    for (auto& t : out) {
      if (t.scalar_type() == at::kComplexFloat) t = t.to(at::kComplexHalf);
      else if (t.scalar_type() == at::kFloat) t = t.to(at::kHalf);
    }
  }
  return out;
}

std::vector<at::Tensor> OpRunner::run_mixed(const std::vector<std::optional<at::Tensor>>& targets) {
  start_run();
  call_.outputs.clear();
  for (const auto& t : targets) {
    if (t.has_value()) {
      TORCH_CHECK(t->is_privateuseone(), call_.label, ": output tensor is on ", t->device(), ", expected a tpu tensor");
      at::assert_no_internal_overlap(*t);
      note_device(*t);
      call_.outputs.push_back(exec::Target{&storage(*t), view_of(*t)});
    } else {
      call_.outputs.push_back(std::nullopt);
    }
  }
  TORCH_INTERNAL_ASSERT(device_ >= 0, call_.label, ": no device for the op");
  call_.device = device_;
  return execute();
}

void OpRunner::run_into(const std::vector<at::Tensor>& targets) {
  start_run();
  for (const at::Tensor& t : targets) {
    TORCH_CHECK(t.is_privateuseone(), call_.label, ": output tensor is on ", t.device(),
                ", expected a tpu tensor");
    at::assert_no_internal_overlap(t);
    note_device(t);
  }
  call_.device = device_;
  call_.outputs.clear();
  for (const at::Tensor& t : targets) {
    call_.outputs.push_back(exec::Target{&storage(t), view_of(t)});
  }
  execute();  // every output is a target: nothing fresh to wrap
}

}  // namespace tpu::aten
