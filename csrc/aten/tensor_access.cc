#include "aten/tensor_access.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>

#include "device/allocator.h"
#include "lowering/view_access.h"

namespace tpu::aten {

ElementType element_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ElementType::kF32;
    case at::kDouble: return ElementType::kF64;
    case at::kBFloat16: return ElementType::kBF16;
    case at::kHalf: return ElementType::kF16;
    case at::kLong: return ElementType::kI64;
    case at::kInt: return ElementType::kI32;
    case at::kShort: return ElementType::kI16;
    case at::kChar: return ElementType::kI8;
    case at::kByte: return ElementType::kU8;
    case at::kBool: return ElementType::kBool;
    case at::kUInt32: return ElementType::kU32;
    case at::kUInt64: return ElementType::kU64;
    case at::kComplexFloat: return ElementType::kC64;
    case at::kComplexDouble: return ElementType::kC128;
    case at::kComplexHalf: return ElementType::kC32;
    default: break;
  }
  TORCH_CHECK_TYPE(false, "tpu does not support dtype ", t,
                   ". Supported: float32, float64, bfloat16, float16, int64, int32, int16, int8, "
                   "uint8, bool, complex32, complex64 and complex128. Fix: convert the tensor on the CPU "
                   "first, e.g. t.to(torch.float32) or t.to(torch.complex64).");
}

bool is_supported(at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kBFloat16: case at::kHalf: case at::kLong:
    case at::kInt: case at::kShort: case at::kChar: case at::kByte: case at::kBool:
    case at::kUInt32: case at::kUInt64: case at::kComplexFloat: case at::kComplexDouble: case at::kComplexHalf:
      return true;
    default:
      return false;
  }
}

at::ScalarType scalar_type(ElementType t) {
  switch (t) {
    case ElementType::kF32: return at::kFloat;
    case ElementType::kF64: return at::kDouble;
    case ElementType::kBF16: return at::kBFloat16;
    case ElementType::kF16: return at::kHalf;
    case ElementType::kI64: return at::kLong;
    case ElementType::kI32: return at::kInt;
    case ElementType::kI16: return at::kShort;
    case ElementType::kI8: return at::kChar;
    case ElementType::kU8: return at::kByte;
    case ElementType::kBool: return at::kBool;
    case ElementType::kU32: return at::kUInt32;
    case ElementType::kU64: return at::kUInt64;
    case ElementType::kC64: return at::kComplexFloat;
    case ElementType::kC128: return at::kComplexDouble;
    case ElementType::kC32: return at::kComplexHalf;
  }
  return at::kFloat;
}

runtime::DeviceStorage& storage(const at::Tensor& t) { return device::storage_of(t); }

int tpu_index(const at::Tensor& t) { return t.device().index(); }

exec::View view_of(const at::Tensor& t) {
  exec::View v;
  v.dtype = element_type(t.scalar_type());
  v.sizes.assign(t.sizes().begin(), t.sizes().end());
  v.strides.assign(t.strides().begin(), t.strides().end());
  v.offset = t.storage_offset();
  if (t.numel() > 0) {
    int64_t last = v.offset;
    for (size_t i = 0; i < v.sizes.size(); ++i) last += (v.sizes[i] - 1) * v.strides[i];
    const size_t needed = static_cast<size_t>(last + 1) * t.element_size();
    const size_t have = storage(t).nbytes();
    TORCH_CHECK(needed <= have, "this tpu tensor views ", needed, " bytes of a storage that holds ",
                have, " bytes: the storage was freed or shrunk (e.g. by untyped_storage().resize_(0)). "
                "Fix: resize the storage back (untyped_storage().resize_(n)) or do not use the "
                "tensor after freeing its storage.");
  }
  return v;
}

at::Tensor empty_on(at::IntArrayRef sizes, at::ScalarType dtype, int device) {
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
  return at::detail::empty_generic(sizes, &device::allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype,
                                   std::nullopt);
}

at::Tensor wrap(exec::FreshOutput out, int device, const char* writer) {
  at::Tensor t = empty_on(out.type.dims, scalar_type(out.type.dtype), device);
  exec::Executor::get().assign(storage(t), std::move(out), writer);
  return t;
}

bool is_whole_buffer(const at::Tensor& t, const runtime::DeviceStorage::Contents& c) {
  return c.buffer != nullptr && c.type.dtype == element_type(t.scalar_type()) &&
         t.storage_offset() == 0 && t.is_contiguous() && t.numel() == c.type.numel();
}

bool covers_storage(const at::Tensor& t) {
  return t.storage_offset() == 0 && t.is_contiguous() &&
         static_cast<size_t>(t.numel()) * t.element_size() == storage(t).nbytes();
}

}  // namespace tpu::aten
