// linalg_matrix_exp: float32/float64 and complex64/complex128 run the scaling-and-squaring
// lowering (lowering/matrix_exp.cc); float16/bfloat16 compute in float32; other dtypes take
// the counted CPU fallback (which raises the CPU's error).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "aten/complex_support.h"
#include "aten/linalg_common.h"
#include "aten/op_runner.h"

namespace tpu::aten {
namespace {

at::Tensor tpu_matrix_exp(const at::Tensor& a) {
  TORCH_CHECK(a.dim() >= 2 && a.size(-1) == a.size(-2), "linalg.matrix_exp: A must be batches of square matrices, but they are ",
              a.dim() >= 2 ? a.size(-2) : 0, " by ", a.dim() >= 2 ? a.size(-1) : 0, " matrices");
  if (a.numel() == 0) return at::empty(a.sizes(), a.options());
  const bool half = a.scalar_type() == at::kHalf || a.scalar_type() == at::kBFloat16;
  const at::ScalarType compute = half ? at::kFloat : a.scalar_type();
  const Dims batch = batch_dims(a);
  OpRunner r("matrix_exp", "aten::linalg_matrix_exp");
  r.input(as3d(a, batch), compute);
  return unflatten(r.run1(), batch).to(a.scalar_type());
}

void k_matrix_exp_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const at::Tensor a = torch::jit::peek(*stack, 0, 1).toTensor();
  const auto t = a.scalar_type();
  if (!at::isFloatingType(t) && t != at::kComplexFloat && t != at::kComplexDouble) {
    run_cpu_fallback(op, stack);
    return;
  }
  at::Tensor out = tpu_matrix_exp(a);
  torch::jit::drop(*stack, 1);
  stack->emplace_back(std::move(out));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("linalg_matrix_exp", torch::CppFunction::makeFromBoxedFunction<&k_matrix_exp_boxed>());
}

}  // namespace
}  // namespace tpu::aten
