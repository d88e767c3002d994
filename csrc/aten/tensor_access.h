// How kernels see tpu tensors: dtype mapping, views of storages, new tensors from results.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>

#include "common/element_type.h"
#include "exec/executor.h"
#include "exec/op_call.h"
#include "runtime/device_storage.h"

namespace tpu::aten {

// Throws a clear error naming the dtype for types tpu does not support (complex, float8, ...).
ElementType element_type(at::ScalarType t);
at::ScalarType scalar_type(ElementType t);
bool is_supported(at::ScalarType t);

// The (sizes, strides, offset) view of `t` into its storage. Errors clearly when the storage
// is too small for the view (freed with resize_(0), or shrunk).
exec::View view_of(const at::Tensor& t);
runtime::DeviceStorage& storage(const at::Tensor& t);
int tpu_index(const at::Tensor& t);

// A new contiguous tpu tensor on `device` holding a fresh program output.
at::Tensor wrap(exec::FreshOutput out, int device, const char* writer);
// An empty (unwritten) contiguous tpu tensor.
at::Tensor empty_on(at::IntArrayRef sizes, at::ScalarType dtype, int device);

// An optional tensor argument that was passed (not None, not undefined).
inline bool given(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// True when `t` is its storage's whole buffer, as laid out (reading needs no program).
bool is_whole_buffer(const at::Tensor& t, const runtime::DeviceStorage::Contents& contents);
// True when writing `t` replaces its storage's entire contents.
bool covers_storage(const at::Tensor& t);

}  // namespace tpu::aten
