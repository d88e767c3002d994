#include "distributed/tpu_backend.h"

#include <ATen/ATen.h>

#include "aten/tensor_access.h"
#include "exec/execution_mode.h"

namespace tpu::distributed {

using lowering::CollectiveCombine;

TpuBackend::TpuBackend(int rank, int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeout_(timeout) {}

std::string TpuBackend::where(const char* what) const {
  return std::string("tpu_dist ") + what + " on rank " + std::to_string(getRank()) + " of " +
         std::to_string(getSize()) + " (" + transport() + " transport)";
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceCoalescedOptions& opts) {
  c10d::AllreduceOptions o;
  o.reduceOp = opts.reduceOp;
  o.timeout = opts.timeout;
  return allreduce(tensors, o);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::AllgatherOptions& opts) {
  return allgather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                           const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> outs{output}, ins{input};
  return allgather_into_tensor_coalesced(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outs{output}, ins{input};
  return reduce_scatter_tensor_coalesced(outs, ins, opts);
}

int TpuBackend::check_root(int64_t root, const char* what) const {
  TORCH_CHECK(root >= 0 && root < getSize(), where(what), ": root ", root, " is not a rank of the group");
  return static_cast<int>(root);
}

void TpuBackend::check_gathered(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                                const char* what) const {
  TORCH_CHECK(inputs.size() == outputs.size(), where(what), ": one output per input is needed");
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * getSize() &&
                    outputs[i].scalar_type() == inputs[i].scalar_type(),
                where(what), ": the output ", describe(outputs[i]), " must hold ", getSize(),
                " copies of the input ", describe(inputs[i]));
  }
}

void TpuBackend::check_scattered(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                                 const char* what) const {
  TORCH_CHECK(inputs.size() == outputs.size(), where(what), ": one output per input is needed");
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * getSize() &&
                    outputs[i].scalar_type() == inputs[i].scalar_type(),
                where(what), ": the input ", describe(inputs[i]), " must hold ", getSize(),
                " parts of the size of the output ", describe(outputs[i]));
  }
}

c10::Device TpuBackend::check_tensors(const std::vector<at::Tensor>& tensors, const char* what) const {
  std::optional<c10::Device> device;
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.defined(), where(what), ": got an undefined tensor");
    TORCH_CHECK(t.is_privateuseone(), where(what), ": got a tensor on ", t.device(),
                "; tpu_dist runs collectives on tpu tensors. Fix: move it with .to('tpu'), or run "
                "CPU collectives on Gloo: init_process_group('cpu:gloo,tpu:tpu_dist') (the default "
                "group of torch_tpu already routes CPU tensors and object collectives to Gloo)");
    TORCH_CHECK(aten::is_supported(t.scalar_type()), where(what), ": dtype ", t.scalar_type(),
                " is not supported on tpu");
    TORCH_CHECK(!t.is_sparse(), where(what), ": sparse tensors are not supported");
    if (!device) {
      device = t.device();
    } else {
      TORCH_CHECK(*device == t.device(), where(what), ": tensors on ", *device, " and ", t.device(),
                  "; one rank's tensors must all be on its own device");
    }
  }
  TORCH_CHECK(device.has_value(), where(what), ": no tensors given");
  return *device;
}

c10::Device TpuBackend::check_tensors(const std::vector<std::vector<at::Tensor>>& lists,
                                      const char* what) const {
  std::vector<at::Tensor> all;
  for (const auto& l : lists) all.insert(all.end(), l.begin(), l.end());
  return check_tensors(all, what);
}

Reduction TpuBackend::reduction(const c10d::ReduceOp& op, at::ScalarType dtype, const char* what) const {
  Reduction r;
  const bool floating = at::isFloatingType(dtype);
  const bool integral = at::isIntegralType(dtype, /*includeBool=*/true);
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.combine = CollectiveCombine::kSum; r.name = "SUM"; break;
    case c10d::ReduceOp::PRODUCT: r.combine = CollectiveCombine::kProd; r.name = "PRODUCT"; break;
    case c10d::ReduceOp::MIN: r.combine = CollectiveCombine::kMin; r.name = "MIN"; break;
    case c10d::ReduceOp::MAX: r.combine = CollectiveCombine::kMax; r.name = "MAX"; break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(floating, where(what), ": ReduceOp.AVG needs a floating-point tensor, got ", dtype,
                  ". Fix: reduce with SUM and divide, or convert to a float dtype first");
      r.combine = CollectiveCombine::kSum;
      r.mean = true;
      r.name = "AVG";
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK(floating, where(what), ": PREMUL_SUM needs a floating-point tensor, got ", dtype);
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s != nullptr, where(what), ": PREMUL_SUM without its factor");
      r.combine = CollectiveCombine::kSum;
      r.premul = s->tensor_factor.defined() ? s->tensor_factor
                                            : at::scalar_tensor(s->double_factor, at::kDouble);
      r.name = "PREMUL_SUM";
      break;
    }
    case c10d::ReduceOp::BAND: case c10d::ReduceOp::BOR: case c10d::ReduceOp::BXOR:
      TORCH_CHECK(integral, where(what), ": bitwise reductions need an integer or bool tensor, got ", dtype);
      r.combine = op.op_ == c10d::ReduceOp::BAND ? CollectiveCombine::kAnd
                  : op.op_ == c10d::ReduceOp::BOR ? CollectiveCombine::kOr
                                                  : CollectiveCombine::kXor;
      r.name = op.op_ == c10d::ReduceOp::BAND ? "BAND" : op.op_ == c10d::ReduceOp::BOR ? "BOR" : "BXOR";
      break;
    default:
      TORCH_CHECK(false, where(what), ": unsupported reduce operation ", static_cast<int>(op.op_));
  }
  return r;
}

at::Tensor dense(const at::Tensor& t) {
  // The storage's buffer must have exactly this shape: a collective program reads its inputs
  // whole, so any other buffer layout (a flat or never-written storage) would change the
  // program's text on this rank alone - and ranks running different programs never meet.
  // Recorded into a deferred graph (only there is the mode Fused here: device_backend.h), the
  // collective reads the graph's value of the view instead, and the ranks compare the whole
  // graph's fingerprint before launching it; looking at the buffer would launch the graph.
  if (exec::eager_mode() == exec::EagerMode::kFused && t.is_contiguous()) return t;
  if (aten::covers_storage(t)) {
    const auto contents = aten::storage(t).contents();
    if (aten::is_whole_buffer(t, contents) && contents.type.dims == hlo::Dims(t.sizes().begin(), t.sizes().end())) {
      return t;
    }
  }
  return t.clone(at::MemoryFormat::Contiguous);
}

std::string describe(const at::Tensor& t) {
  std::string s = std::string(c10::getDtypeNames(t.scalar_type()).first) + "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace tpu::distributed
