// Tensor creation on tpu: empty, empty_strided, fill_, zero_, arange, linspace, logspace, eye. zeros, ones, full,
// rand* and *_like are PyTorch composites over these.
#include <ATen/EmptyTensor.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "device/allocator.h"
#include "device/current_device.h"
#include "exec/execution_mode.h"
#include "exec/executor.h"
#include "exec/fused_graph.h"
#include "exec/fused_graphs.h"
#include "exec/program_cache.h"

namespace tpu::aten {
namespace {

void check_options(std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "tpu tensors support only the strided layout, got ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "only CPU tensors can be pinned; pin_memory=True is not valid for tpu tensors");
}

c10::DeviceGuard guard_for(std::optional<at::Device> device) {
  const c10::Device d = c10::device_or_default(device);
  return c10::DeviceGuard(c10::Device(c10::DeviceType::PrivateUse1, device::resolve(d)));
}

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  check_options(layout, pin_memory);
  const at::ScalarType t = c10::dtype_or_default(dtype);
  element_type(t);  // rejects unsupported dtypes
  auto guard = guard_for(device);
  return at::detail::empty_generic(size, &device::allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t, memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  const at::ScalarType t = c10::dtype_or_default(dtype);
  element_type(t);
  auto guard = guard_for(device);
  return at::detail::empty_strided_generic(size, stride, &device::allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t);
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  // One element filled outside a recording - the seed of every loss.backward() - is uploaded as
  // the storage's new buffer: no program launch, and nothing for the backward to wait for. Not
  // while a compiled graph is captured on the device (by any thread: under a StrictScope around a
  // collective, or another rank thread's work), nor into a storage a deferred graph tracks: a host
  // write there would cut the capture, which is then recorded again on every call.
  if (self.numel() == 1 && exec::eager_mode() != exec::EagerMode::kFused && covers_storage(self) &&
      !storage(self).tracked() && !exec::Executor::get().fused().of(tpu_index(self)).capturing()) {
    const ElementType et = element_type(self.scalar_type());
    if (self.dim() == 0 && !is_complex(et)) {
      // A 0-dim one (the seed itself) shares the device's cached buffer of that value
      // (exec/scalar_cache.h): no transfer after the first step. Buffers are immutable and a
      // shared one is never donated, so a later write to this tensor replaces it here only.
      storage(self).set_contents(exec::ProgramCache::get().scalar(tpu_index(self), scalar_value(value, et)),
                                 hlo::TensorType{et, {}}, "aten::fill_");
      return self;
    }
    self.copy_(at::scalar_tensor(value, self.options().device(at::kCPU)).reshape(self.sizes()));
    return self;
  }
  OpRunner r("full", "aten::fill_");
  r.scalar(value, self.scalar_type());
  r.attrs().set_ints("shape", std::vector<int64_t>(self.sizes().begin(), self.sizes().end()));
  r.run_into(self);
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  if (!value.is_privateuseone()) return fill_scalar(self, value.item());
  OpRunner r("copy", "aten::fill_");
  r.input(value, self.scalar_type());
  r.attrs().set_ints("shape", std::vector<int64_t>(self.sizes().begin(), self.sizes().end()));
  r.run_into(self);
  return self;
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

// The dtype arange computes in on the CPU (ATen's acc_type), so values match exactly.
at::ScalarType arange_compute_dtype(at::ScalarType out) {
  if (out == at::kFloat || out == at::kDouble) return at::kDouble;
  if (out == at::kHalf || out == at::kBFloat16) return at::kFloat;
  return at::kLong;
}

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, at::Tensor& out) {
  const int64_t size = out.scalar_type() == at::kLong
                           ? at::native::compute_arange_size<int64_t>(start, end, step)
                           : at::native::compute_arange_size<double>(start, end, step);
  at::native::resize_output(out, {size});
  const at::ScalarType compute = arange_compute_dtype(out.scalar_type());
  OpRunner r("arange", "aten::arange");
  r.scalar(start, compute).scalar(step, compute);
  r.attrs().set_int("size", size);
  r.run_into(out);
  return out;
}

// ATen's linspace arithmetic: start and end rounded to the output type, the step in that type
// (double for integers), computed here once on the host.
struct SpaceParams {
  at::ScalarType compute;
  at::Scalar start, end, step;
};

template <typename T>
SpaceParams space_params(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::ScalarType compute) {
  using Step = std::conditional_t<std::is_integral_v<T>, double, T>;
  const T s = start.to<T>(), e = end.to<T>();
  const Step step = (static_cast<Step>(e) - static_cast<Step>(s)) / static_cast<Step>(std::max<int64_t>(steps - 1, 1));
  return {compute, at::Scalar(static_cast<Step>(s)), at::Scalar(static_cast<Step>(e)), at::Scalar(step)};
}

SpaceParams linspace_params(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::ScalarType out) {
  switch (out) {
    case at::kDouble: return space_params<double>(start, end, steps, at::kDouble);
    case at::kFloat: return space_params<float>(start, end, steps, at::kFloat);
    case at::kHalf: return space_params<at::Half>(start, end, steps, at::kHalf);
    case at::kBFloat16: return space_params<at::BFloat16>(start, end, steps, at::kBFloat16);
    case at::kByte: return space_params<uint8_t>(start, end, steps, at::kDouble);
    case at::kChar: return space_params<int8_t>(start, end, steps, at::kDouble);
    case at::kShort: return space_params<int16_t>(start, end, steps, at::kDouble);
    case at::kInt: return space_params<int32_t>(start, end, steps, at::kDouble);
    case at::kLong: return space_params<int64_t>(start, end, steps, at::kDouble);
    default: TORCH_CHECK(false, "linspace/logspace: unsupported dtype ", out, " on tpu; use a real floating or integer dtype");
  }
}

at::Tensor& space_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, std::optional<double> base,
                      at::Tensor& out, const char* label) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  at::native::resize_output(out, {steps});
  if (steps == 0) return out;
  // logspace raises base to exponents stepped in double precision, then rounds once.
  const SpaceParams p = linspace_params(start, end, steps, base.has_value() ? at::kDouble : out.scalar_type());
  OpRunner r("linspace", label);
  r.scalar(p.start, p.compute).scalar(p.end, p.compute).scalar(p.step, p.compute);
  r.attrs().set_int("steps", steps);
  if (base.has_value()) r.attrs().set_float("base", *base);
  r.run_into(out);
  return out;
}

at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::Tensor& out) {
  return space_out(start, end, steps, std::nullopt, out, "aten::linspace");
}
at::Tensor& logspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, double base, at::Tensor& out) {
  return space_out(start, end, steps, base, out, "aten::logspace");
}

at::Tensor& eye_out_nm(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  at::native::resize_output(out, {n, m});
  OpRunner r("eye", "aten::eye");
  r.attrs().set_int("n", n).set_int("m", m).set_dtype("dtype", element_type(out.scalar_type()));
  r.run_into(out);
  return out;
}

at::Tensor& eye_out_n(int64_t n, at::Tensor& out) { return eye_out_nm(n, n, out); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("fill_.Tensor", fill_tensor);
  m.impl("zero_", zero_);
  m.impl("arange.start_out", arange_out);
  m.impl("linspace.out", linspace_out);
  m.impl("logspace.out", logspace_out);
  m.impl("eye.m_out", eye_out_nm);
  m.impl("eye.out", eye_out_n);
}

}  // namespace
}  // namespace tpu::aten
