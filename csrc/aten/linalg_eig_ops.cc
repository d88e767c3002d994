// linalg.eig / linalg.eigvals of general square matrices. StableHLO has no general eig; where the
// plugin registers the host kernel torch_tpu_eig (the XLA CPU plugin, host_kernels/eig.h) the call
// is one op of the program like any other - in Strict, Fused and compiled code - and gives the
// CPU's results (the same LAPACK routine). On other plugins it is the counted CPU fallback, as JAX
// runs eig only on its CPU backend.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "aten/complex_support.h"
#include "aten/linalg_common.h"
#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "host_kernels/eig.h"
#include "runtime/runtime.h"

namespace tpu::aten {
namespace {

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

// linalg_eig(self) / linalg_eig.out(self, eigenvalues, eigenvectors) with kVectors, and
// _linalg_eigvals(self) / linalg_eigvals.out(self, out) without.
template <bool kVectors>
void k_eig_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t args = op.schema().arguments().size();
  const at::Tensor a = torch::jit::peek(*stack, 0, args).toTensor();
  if (!runtime::Runtime::get().has_host_kernel(host_kernels::kEig)) {
    run_cpu_fallback(op, stack);
    return;
  }
  auto [values, vectors] = eig(a, kVectors);
  std::vector<at::Tensor> results = {std::move(values)};
  if (kVectors) results.push_back(std::move(vectors));
  for (size_t i = 0; args > 1 && i < results.size(); ++i) {  // the out= form: write and return the outs
    at::Tensor out = torch::jit::peek(*stack, 1 + i, args).toTensor();
    write_out(results[i], out);
    results[i] = out;
  }
  torch::jit::drop(*stack, args);
  for (auto& r : results) stack->emplace_back(std::move(r));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("linalg_eig", torch::CppFunction::makeFromBoxedFunction<&k_eig_boxed<true>>());
  m.impl("linalg_eig.out", torch::CppFunction::makeFromBoxedFunction<&k_eig_boxed<true>>());
  m.impl("_linalg_eigvals", torch::CppFunction::makeFromBoxedFunction<&k_eig_boxed<false>>());
  m.impl("linalg_eigvals.out", torch::CppFunction::makeFromBoxedFunction<&k_eig_boxed<false>>());
}

}  // namespace
}  // namespace tpu::aten
