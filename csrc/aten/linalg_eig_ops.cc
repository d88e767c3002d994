// linalg.eig / linalg.eigvals of general square matrices. StableHLO has no general eig; where the
// plugin registers the host kernel torch_tpu_eig (the XLA CPU plugin, host_kernels/eig.h) the call
// is one op of the program like any other - in Strict, Fused and compiled code - and gives the
// CPU's results (the same LAPACK routine). On other plugins it is the counted CPU fallback, as JAX
// runs eig only on its CPU backend.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>

#include "aten/complex_support.h"
#include "aten/linalg_common.h"
#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "host_kernels/eig.h"
#include "runtime/runtime.h"

namespace tpu::aten {
namespace {

bool kernel_registered() {
  const auto& kernels = runtime::Runtime::get().host_kernels();
  return std::find(kernels.begin(), kernels.end(), host_kernels::kEig) != kernels.end();
}

// (eigenvalues, eigenvectors) of a's matrices; eigenvectors undefined without `vectors`.
std::pair<at::Tensor, at::Tensor> eig(const at::Tensor& a, bool vectors) {
  const char* api = vectors ? "linalg.eig" : "linalg.eigvals";
  check_float_or_complex_matrix(a, api);
  check_square(a, api);
  const Dims batch = batch_dims(a);
  const int64_t n = a.size(-1);
  const auto complex = c10::toComplexType(c10::toRealValueType(a.scalar_type()));
  Dims vshape = batch;
  vshape.push_back(n);
  if (a.numel() == 0) {
    return {at::empty(vshape, a.options().dtype(complex)),
            vectors ? at::empty(a.sizes(), a.options().dtype(complex)) : at::Tensor()};
  }
  OpRunner r("eig", api);
  r.input(as3d(a, batch));
  r.attrs().set_bool("vectors", vectors);
  auto out = r.run(vectors ? 2 : 1);
  return {out[0].reshape(vshape), vectors ? unflatten(out[1], batch) : at::Tensor()};
}

// linalg_eig(self) and linalg_eig.out(self, eigenvalues, eigenvectors).
void k_eig_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t args = op.schema().arguments().size();
  const at::Tensor a = torch::jit::peek(*stack, 0, args).toTensor();
  if (!kernel_registered()) {
    run_cpu_fallback(op, stack);
    return;
  }
  auto [values, vectors] = eig(a, true);
  if (args == 1) {
    torch::jit::drop(*stack, 1);
    stack->emplace_back(std::move(values));
    stack->emplace_back(std::move(vectors));
    return;
  }
  at::Tensor out_values = torch::jit::peek(*stack, 1, args).toTensor();
  at::Tensor out_vectors = torch::jit::peek(*stack, 2, args).toTensor();
  write_out(values, out_values);
  write_out(vectors, out_vectors);
  torch::jit::drop(*stack, args);
  stack->emplace_back(std::move(out_values));
  stack->emplace_back(std::move(out_vectors));
}

// _linalg_eigvals(self) and linalg_eigvals.out(self, out).
void k_eigvals_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t args = op.schema().arguments().size();
  const at::Tensor a = torch::jit::peek(*stack, 0, args).toTensor();
  if (!kernel_registered()) {
    run_cpu_fallback(op, stack);
    return;
  }
  at::Tensor values = eig(a, false).first;
  if (args == 1) {
    torch::jit::drop(*stack, 1);
    stack->emplace_back(std::move(values));
    return;
  }
  at::Tensor out = torch::jit::peek(*stack, 1, args).toTensor();
  write_out(values, out);
  torch::jit::drop(*stack, args);
  stack->emplace_back(std::move(out));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("linalg_eig", torch::CppFunction::makeFromBoxedFunction<&k_eig_boxed>());
  m.impl("linalg_eig.out", torch::CppFunction::makeFromBoxedFunction<&k_eig_boxed>());
  m.impl("_linalg_eigvals", torch::CppFunction::makeFromBoxedFunction<&k_eigvals_boxed>());
  m.impl("linalg_eigvals.out", torch::CppFunction::makeFromBoxedFunction<&k_eigvals_boxed>());
}

}  // namespace
}  // namespace tpu::aten
