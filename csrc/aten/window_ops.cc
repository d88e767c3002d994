// torch.kaiser_window on tpu. ATen's composite kaiser_window fills its result through
// kaiser_window_stub, a DispatchStub only CPU and CUDA provide (on tpu: an internal assert), so
// this registers the stub's tpu kernel: the same formula in device ops,
// w[n] = I0(beta * sqrt(1 - ((n - a) / a)^2)) / I0(beta), a = (N - 1) / 2. The other window
// functions are composites of ordinary ops and need nothing.
#include <ATen/TensorIterator.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/special_i0.h>
#include <ATen/ops/sqrt.h>

namespace tpu::aten {

// The stub's kernel: output 0 is the window, input 1 the positions 0 .. N - 1.
void kaiser_window_kernel(at::TensorIteratorBase& iter, const int64_t window_length, const double beta) {
  at::Tensor window = iter.tensor(0);
  const at::Tensor positions = iter.tensor(1).to(window.scalar_type());
  const double alpha = static_cast<double>(window_length - 1) / 2.0;
  const at::Tensor x = (positions - alpha) / alpha;
  const at::Tensor i0_beta = at::special_i0(at::scalar_tensor(beta, window.options()));
  window.copy_(at::special_i0(at::sqrt(1 - x * x) * beta) / i0_beta);
}

}  // namespace tpu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(kaiser_window_stub, &tpu::aten::kaiser_window_kernel)
}  // namespace at::native
