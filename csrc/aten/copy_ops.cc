// Copies between tpu tensors, and between tpu and CPU tensors in both directions, plus
// .item(). Host data crosses with the transfers of runtime/transfers.h (this file only unpacks
// tensors and picks the kind of transfer); on the device a copy is one "copy" program
// (dtype conversion + broadcast + write into the destination view), or nothing at all when the
// destination takes over the source's immutable buffer whole.
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/complex_support.h"
#include "aten/host_transfer.h"
#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "exec/fused_graphs.h"
#include "device/host_allocator.h"
#include "device/memory_limit.h"
#include "runtime/runtime.h"
#include "runtime/transfers.h"

namespace tpu::aten {
namespace {

using runtime::DeviceStorage;

hlo::Dims dims_of(const at::Tensor& t) { return {t.sizes().begin(), t.sizes().end()}; }

// A buffer with `t`'s elements, dense, in t's dtype and shape (maybe the storage's own).
std::shared_ptr<pjrt::Buffer> dense_buffer(const at::Tensor& t) {
  auto contents = storage(t).contents();
  if (is_whole_buffer(t, contents)) return contents.buffer;
  OpRunner r("copy", "aten::_copy_from");
  r.input(t).attrs().set_ints("shape", dims_of(t));
  at::Tensor dense = r.run1();
  return storage(dense).contents().buffer;
}

// Writes a dense buffer (dtype/shape `type`, on dst's device) into `dst`, converting and
// broadcasting as copy_ does.
void write_buffer(std::shared_ptr<pjrt::Buffer> buffer, const hlo::TensorType& type, const at::Tensor& dst,
                  const char* label) {
  const bool same = type.dtype == element_type(dst.scalar_type()) && type.dims == dims_of(dst);
  if (same && covers_storage(dst)) {
    storage(dst).set_contents(std::move(buffer), type, label);
    return;
  }
  DeviceStorage staging(tpu_index(dst), type.numel() * element_size(type.dtype));
  staging.set_contents(std::move(buffer), type, label);
  exec::OpCall call;
  call.op = "copy";
  call.label = label;
  call.attrs.set_ints("shape", dims_of(dst));
  hlo::Dims strides(type.dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(type.dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * type.dims[i + 1];
  call.inputs.push_back(exec::Input::tensor(&staging, exec::View{type.dtype, type.dims, strides, 0},
                                            element_type(dst.scalar_type())));
  call.outputs.push_back(exec::Target{&storage(dst), view_of(dst)});
  call.device = tpu_index(dst);
  exec::Executor::get().run(call);
}

void host_to_device(const at::Tensor& src_cpu, const at::Tensor& dst, bool non_blocking) {
  at::Tensor src = src_cpu.to(dst.scalar_type()).contiguous();
  const hlo::TensorType type{element_type(src.scalar_type()), dims_of(src)};
  const bool async = non_blocking && device::pinned_allocator().is_pinned(src.data_ptr());
  auto& rt = runtime::Runtime::get();
  const int device = tpu_index(dst);
  std::shared_ptr<pjrt::Buffer> buffer =
      async ? runtime::upload_async(rt.client(), src.data_ptr(), type.dtype, type.dims, device,
                                    std::make_shared<at::Tensor>(src), rt.tracker(device))
            : runtime::upload(rt.client(), src.data_ptr(), type.dtype, type.dims, device);
  write_buffer(std::move(buffer), type, dst, "host-to-device copy");
}

void device_to_host(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  std::shared_ptr<pjrt::Buffer> buffer = dense_buffer(src);
  const bool direct = dst.is_contiguous() && dst.scalar_type() == src.scalar_type() &&
                      dst.sizes() == src.sizes();
  at::Tensor host = direct ? dst : at::empty(src.sizes(), src.options().device(at::kCPU));
  const size_t nbytes = static_cast<size_t>(src.numel()) * src.element_size();
  const char* writer = storage(src).last_writer();
  runtime::WorkTracker& tracker = runtime::Runtime::get().tracker(tpu_index(src));
  if (direct && non_blocking && device::pinned_allocator().is_pinned(dst.data_ptr())) {
    runtime::download_async(std::move(buffer), host.data_ptr(), nbytes, tracker);
    return;
  }
  try {
    // Also raises a failed torch._assert_async of the device (a blocking read synchronizes).
    runtime::download(*buffer, host.data_ptr(), nbytes, writer, tracker);
  } catch (const std::exception& e) {
    device::raise_device_error(e.what(), tpu_index(src));  // torch.OutOfMemoryError when it is one
  }
  if (!direct) dst.copy_(host);
}

void device_to_device(const at::Tensor& src, const at::Tensor& dst) {
  if (tpu_index(src) == tpu_index(dst)) {
    // A pending source (Fused Eager) is copied by a recorded op instead of being flushed.
    auto contents = storage(src).pending() ? DeviceStorage::Contents{} : storage(src).contents();
    // (Not while torch.compile records a graph: a shared buffer is not an op it can replay.)
    if (src.scalar_type() == dst.scalar_type() && src.sizes() == dst.sizes() &&
        is_whole_buffer(src, contents) && covers_storage(dst) &&
        exec::FusedGraphs::capture_device() != tpu_index(src)) {
      // Buffers are immutable, so the destination can share the source's.
      storage(dst).set_contents(contents.buffer, contents.type, "aten::copy_");
      return;
    }
    OpRunner r("copy", "aten::copy_");
    r.input(src, dst.scalar_type()).attrs().set_ints("shape", dims_of(dst));
    r.run_into(dst);
    return;
  }
  std::shared_ptr<pjrt::Buffer> buffer = dense_buffer(src);
  std::shared_ptr<pjrt::Buffer> moved =
      runtime::copy_to_device(*buffer, runtime::Runtime::get().device(tpu_index(dst)));
  write_buffer(std::move(moved), hlo::TensorType{element_type(src.scalar_type()), dims_of(src)}, dst,
               "device-to-device copy");
}

}  // namespace

std::shared_ptr<pjrt::Event> write_adopting_host_memory(const at::Tensor& host, const at::Tensor& dst) {
  if (dst.numel() == 0) return nullptr;
  if (!host.is_cpu() || !host.is_contiguous() || host.scalar_type() != dst.scalar_type() ||
      host.storage_offset() != 0 || !dst.is_privateuseone()) {
    dst.copy_(host);
    return nullptr;
  }
  const hlo::TensorType type{element_type(host.scalar_type()), dims_of(host)};
  runtime::AdoptedUpload upload = runtime::upload_adopting(runtime::Runtime::get().client(), host.data_ptr(),
                                                           type.dtype, type.dims, tpu_index(dst));
  write_buffer(std::move(upload.buffer), type, dst, "host-to-device copy (tpu_dist)");
  return std::move(upload.done_with_host);
}

namespace {

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "copy_: undefined tensor");
  // The source broadcasts to the destination (ATen's copy_ checks this before any kernel, also
  // for empty tensors).
  const at::DimVector broadcast = at::infer_size_dimvector(dst.sizes(), self.sizes());
  TORCH_CHECK(c10::IntArrayRef(broadcast) == dst.sizes(), "output with shape ", dst.sizes(),
              " doesn't match the broadcast shape ", c10::IntArrayRef(broadcast));
  if (dst.numel() == 0) return dst;
  if (has_math_bits(self, dst)) return copy_with_math_bits(self, dst, non_blocking);
  if (self.is_complex() && !dst.is_complex()) {
    TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");  // as ATen's copy_
  }
  const bool src_tpu = self.is_privateuseone();
  const bool dst_tpu = dst.is_privateuseone();
  if (src_tpu && dst_tpu) {
    device_to_device(self, dst);
  } else if (dst_tpu) {
    TORCH_CHECK(self.is_cpu(), "copy_: cannot copy from ", self.device(), " to ", dst.device(),
                " directly. Fix: copy through the CPU (.cpu()) first.");
    host_to_device(self, dst, non_blocking);
  } else {
    TORCH_CHECK(dst.is_cpu(), "copy_: cannot copy from ", self.device(), " to ", dst.device(),
                " directly. Fix: copy through the CPU (.cpu()) first.");
    device_to_host(self, dst, non_blocking);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_output(dst, self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  if (self.is_conj() || self.is_neg()) return copy_with_math_bits(self.reshape({}), host, false).item();
  device_to_host(self.reshape({}), host, false);
  return host.item();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
}

}  // namespace
}  // namespace tpu::aten
