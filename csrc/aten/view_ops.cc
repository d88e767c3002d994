// Metadata-only ops: views share their base's storage (as_strided, view, unfold, ...), and
// resize_/set_ change which part of a storage a tensor sees. No device work happens here.
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "aten/tensor_access.h"
#include "device/allocator.h"
#include "device/storage_resize.h"

namespace tpu::aten {
namespace {

// Grows the storage when `self`'s view needs more bytes than it holds.
void ensure_storage_fits(const at::Tensor& self) {
  if (self.numel() == 0) return;
  int64_t last = self.storage_offset();
  for (int64_t i = 0; i < self.dim(); ++i) last += (self.size(i) - 1) * self.stride(i);
  const size_t needed = static_cast<size_t>(last + 1) * self.element_size();
  if (needed > self.storage().nbytes()) device::resize_storage_bytes(self.storage(), needed);
}

const at::Tensor& resize_(const at::Tensor& self, at::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  for (int64_t s : size) TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
  impl->set_sizes_contiguous(size);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve,
                "Unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  ensure_storage_fits(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset, at::IntArrayRef size,
                        at::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1,
              "set_: expected a tpu storage, got one on ", source.device());
  at::native::checkSetStorage(self, source, offset, size, stride, /*check_offset_in_bounds=*/false);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_offset(offset);
  if (stride.data() != nullptr) {
    impl->set_sizes_and_strides(size, stride);
  } else {
    impl->set_sizes_contiguous(size);
  }
  ensure_storage_fits(self);
  return self;
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &device::allocator(), /*resizable=*/true);
  return set_storage(self, storage, 0, {0}, {});
}

at::Tensor as_strided(const at::Tensor& self, at::IntArrayRef size, at::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

// Lets `param.data = tpu_tensor` (and so Module.to("tpu")) swap a CPU tensor's contents for a
// tpu tensor's in place, as for CUDA: tied parameters stay one Parameter.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && (t.is_cpu() || t.is_privateuseone());
  };
  return self.key_set() == from.key_set() || (dense(self) && dense(from));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("as_strided", as_strided);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", at::native::set_);
  m.impl("set_.source_Tensor", at::native::set_tensor_);
  m.impl("set_", set_empty);
}

}  // namespace
}  // namespace tpu::aten
