// Indexing kernels: advanced indexing (x[idx], x[mask], index_put_), gather/scatter along a
// dim, index_select/add/copy/fill/reduce, take/put, masked_scatter_, nonzero, masked_select.
//
// Data-dependent output sizes (nonzero, masked_select, boolean masks in indexing) read the count
// from the device first, as CUDA does. Out-of-range indices are checked only when asked
// (Debug mode or TORCH_TPU_CHECK_INDICES=1, aten/index_checks.h): XLA clamps them otherwise.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/index_checks.h"
#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "aten/tensor_access.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

at::Tensor on_device_of(const at::Tensor& t, const at::Tensor& like) {
  return t.device() == like.device() ? t : t.to(like.device());
}

void check_index_dtype(const at::Tensor& index, const char* op) {
  TORCH_CHECK_INDEX(index.numel() == 0 || index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
                    "(): Expected dtype int64 for index");
}

int64_t count_true(const at::Tensor& mask) { return mask.ne(0).sum().item<int64_t>(); }

// ---- nonzero, masked_select --------------------------------------------------------------

at::Tensor k_nonzero(const at::Tensor& self) {
  const int64_t count = count_true(self);
  OpRunner r("nonzero", "aten::nonzero");
  r.input(self);
  r.attrs().set_int("count", count);
  return r.run1();
}
at::Tensor& k_nonzero_out(const at::Tensor& self, at::Tensor& out) { return write_out(k_nonzero(self), out); }

at::Tensor k_masked_select(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  const at::Tensor m = on_device_of(mask, self);
  const auto shape = at::infer_size(self.sizes(), m.sizes());
  const int64_t count = count_true(m.expand(shape));
  OpRunner r("masked_select", "aten::masked_select");
  r.input(self).input(m);
  r.attrs().set_int("count", count);
  return r.run1();
}
at::Tensor& k_masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  return write_out(k_masked_select(self, mask), out);
}

// ---- advanced indexing ---------------------------------------------------------------------

// The index tensors of x[indices] as long tensors on self's device, boolean masks expanded
// through nonzero, with the self dimension each one indexes.
struct Indices {
  std::vector<at::Tensor> tensors;
  std::vector<int64_t> dims;
  std::vector<IndexBound> checked;  // the integer indices, filled only when index_checks_on()
};

Indices expand_indices(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  Indices out;
  int64_t dim = 0;
  for (const std::optional<at::Tensor>& opt : indices) {
    if (!opt.has_value() || !opt->defined()) {
      ++dim;
      continue;
    }
    at::Tensor idx = on_device_of(*opt, self);
    if (idx.scalar_type() == at::kBool || idx.scalar_type() == at::kByte) {
      TORCH_CHECK_INDEX(dim + idx.dim() <= self.dim(), "too many indices for tensor of dimension ", self.dim());
      for (int64_t j = 0; j < idx.dim(); ++j) {
        TORCH_CHECK_INDEX(idx.size(j) == self.size(dim + j), "The shape of the mask ", idx.sizes(), " at index ", j,
                          " does not match the shape of the indexed tensor ", self.sizes(), " at index ", dim + j);
      }
      at::Tensor nz = k_nonzero(idx);
      for (int64_t j = 0; j < idx.dim(); ++j) {
        out.tensors.push_back(nz.select(1, j));
        out.dims.push_back(dim + j);
      }
      dim += idx.dim();
    } else {
      TORCH_CHECK_INDEX(at::isIntegralType(idx.scalar_type(), false),
                        "tensors used as indices must be long, int, byte or bool tensors");
      TORCH_CHECK_INDEX(dim < self.dim(), "too many indices for tensor of dimension ", self.dim());
      out.tensors.push_back(idx);
      out.dims.push_back(dim);
      if (index_checks_on()) out.checked.push_back({idx, dim, self.size(dim), true});
      ++dim;
    }
  }
  TORCH_CHECK_INDEX(dim <= self.dim(), "too many indices for tensor of dimension ", self.dim(), " (got ", dim, ")");
  return out;
}

at::Tensor k_index(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  Indices idx = expand_indices(self, indices);
  if (idx.tensors.empty()) return self.clone();
  if (!idx.checked.empty()) check_index_bounds("index", IndexErrorKind::kIndexError, idx.checked);
  OpRunner r("index", "aten::index.Tensor");
  r.input(self);
  for (const at::Tensor& t : idx.tensors) r.input(t, at::kLong);
  r.attrs().set_ints("indexed_dims", idx.dims);
  return r.run1();
}
at::Tensor& k_index_out(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, at::Tensor& out) {
  return write_out(k_index(self, indices), out);
}

at::Tensor& k_index_put_impl(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                             const at::Tensor& values, bool accumulate, bool unsafe) {
  Indices idx = expand_indices(self, indices);
  const at::Tensor v = on_device_of(values, self);
  if (!idx.checked.empty()) check_index_bounds("index_put_", IndexErrorKind::kIndexError, idx.checked);
  if (idx.tensors.empty()) {
    if (accumulate) self.add_(v);
    else self.copy_(v);
    return self;
  }
  OpRunner r("index_put", "aten::index_put_");
  r.input(self).input(v, self.scalar_type());
  for (const at::Tensor& t : idx.tensors) r.input(t, at::kLong);
  r.attrs().set_ints("indexed_dims", idx.dims).set_bool("accumulate", accumulate);
  r.run_into(self);
  return self;
}

// ---- along a dimension ---------------------------------------------------------------------

// gather / scatter: indices in [0, size of self's dim), a RuntimeError on the CPU.
void check_along_dim(const char* op, const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  check_index_bounds(op, IndexErrorKind::kRuntimeError, {{index, dim, self.dim() == 0 ? 1 : self.size(dim), false}});
}

at::Tensor& k_gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad,
                         at::Tensor& out) {
  check_index_dtype(index, "gather");
  const at::Tensor idx = on_device_of(index, self);
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  if (index_checks_on()) check_along_dim("gather", self, d, idx);
  OpRunner r("gather", "aten::gather");
  r.input(self).input(idx, at::kLong);
  r.attrs().set_int("dim", d);
  return write_out(r.run1(), out);
}

at::Tensor scatter_impl(const at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::IValue& src,
                        const std::string& reduce, bool include_self, const char* label) {
  check_index_dtype(index, "scatter");
  const at::Tensor idx = on_device_of(index, self);
  if (index_checks_on()) check_along_dim(label + 6, self, at::maybe_wrap_dim(dim, self.dim()), idx);
  OpRunner r("scatter", label);
  r.input(self).input(idx, at::kLong);
  if (src.isTensor()) r.input(on_device_of(src.toTensor(), self), self.scalar_type());
  else r.scalar(src.toScalar(), self.scalar_type());
  r.attrs().set_int("dim", at::maybe_wrap_dim(dim, self.dim())).set_string("reduce", reduce).set_bool("include_self", include_self);
  return r.run1();
}
at::Tensor& k_scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                              at::Tensor& out) {
  return write_out(scatter_impl(self, dim, index, src, "none", true, "aten::scatter"), out);
}
at::Tensor& k_scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                                at::Tensor& out) {
  return write_out(scatter_impl(self, dim, index, value, "none", true, "aten::scatter"), out);
}
at::Tensor& k_scatter_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                                 c10::string_view reduce, at::Tensor& out) {
  return write_out(scatter_impl(self, dim, index, src, std::string(reduce), true, "aten::scatter"), out);
}
at::Tensor& k_scatter_value_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                       const at::Scalar& value, c10::string_view reduce, at::Tensor& out) {
  return write_out(scatter_impl(self, dim, index, value, std::string(reduce), true, "aten::scatter"), out);
}
at::Tensor& k_scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                              at::Tensor& out) {
  return write_out(scatter_impl(self, dim, index, src, "add", true, "aten::scatter_add"), out);
}
at::Tensor& k_scatter_reduce_two_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const at::Tensor& src, c10::string_view reduce, bool include_self,
                                     at::Tensor& out) {
  return write_out(scatter_impl(self, dim, index, src, std::string(reduce), include_self, "aten::scatter_reduce"), out);
}

at::Tensor k_index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  check_index_dtype(index, "index_select");
  const at::Tensor idx = on_device_of(index, self);
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  if (index_checks_on()) {
    // The CPU's dim-1 fast path raises a RuntimeError, its other paths an IndexError.
    const auto kind = d == 1 && self.dim() > 1 ? IndexErrorKind::kRuntimeError : IndexErrorKind::kIndexError;
    check_index_bounds("index_select", kind, {{idx, d, self.dim() == 0 ? 1 : self.size(d), false}});
  }
  OpRunner r("index_select", "aten::index_select");
  r.input(self).input(idx, at::kLong);
  r.attrs().set_int("dim", d);
  return r.run1();
}
at::Tensor& k_index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  return write_out(k_index_select(self, dim, index), out);
}

at::Tensor index_update(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                        const std::string& reduce, bool include_self, const std::optional<at::Scalar>& alpha,
                        const char* label) {
  check_index_dtype(index, label + 6);
  OpRunner r("index_update", label);
  r.input(self).input(on_device_of(index, self), at::kLong).input(on_device_of(source, self), self.scalar_type());
  if (alpha && !is_one(*alpha)) r.scalar(*alpha, self.scalar_type());
  r.attrs().set_int("dim", at::maybe_wrap_dim(dim, self.dim())).set_string("reduce", reduce).set_bool("include_self", include_self);
  return r.run1();
}
at::Tensor& k_index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                            const at::Scalar& alpha, at::Tensor& out) {
  return write_out(index_update(self, dim, index, source, "add", true, alpha, "aten::index_add"), out);
}
at::Tensor& k_index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                             at::Tensor& out) {
  return write_out(index_update(self, dim, index, source, "copy", true, std::nullopt, "aten::index_copy"), out);
}
at::Tensor& k_index_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                               c10::string_view reduce, bool include_self, at::Tensor& out) {
  return write_out(index_update(self, dim, index, source, std::string(reduce), include_self, std::nullopt,
                                "aten::index_reduce"), out);
}

at::Tensor& fill_index_slices(at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::IValue& value) {
  check_index_dtype(index, "index_fill");
  OpRunner r("index_fill", "aten::index_fill_");
  r.input(self).input(on_device_of(index, self), at::kLong);
  if (value.isTensor()) r.input(value.toTensor(), self.scalar_type());
  else r.scalar(value.toScalar(), self.scalar_type());
  r.attrs().set_int("dim", at::maybe_wrap_dim(dim, self.dim()));
  r.run_into(self);
  return self;
}
at::Tensor& k_index_fill_scalar(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  return fill_index_slices(self, dim, index, value);
}
at::Tensor& k_index_fill_tensor(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return fill_index_slices(self, dim, index, value);
}

at::Tensor k_take(const at::Tensor& self, const at::Tensor& index) {
  check_index_dtype(index, "take");
  OpRunner r("take", "aten::take");
  r.input(self).input(on_device_of(index, self), at::kLong);
  return r.run1();
}
at::Tensor& k_take_out(const at::Tensor& self, const at::Tensor& index, at::Tensor& out) {
  return write_out(k_take(self, index), out);
}
at::Tensor& k_put_(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  check_index_dtype(index, "put");
  OpRunner r("put", "aten::put_");
  r.input(self).input(on_device_of(index, self), at::kLong).input(on_device_of(source, self), self.scalar_type());
  r.attrs().set_bool("accumulate", accumulate);
  r.run_into(self);
  return self;
}

at::Tensor& k_masked_scatter_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  OpRunner r("masked_scatter", "aten::masked_scatter_");
  r.input(self).input(on_device_of(mask, self)).input(on_device_of(source, self), self.scalar_type());
  r.run_into(self);
  return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nonzero", k_nonzero);
  m.impl("nonzero.out", k_nonzero_out);
  m.impl("masked_select", k_masked_select);
  m.impl("masked_select.out", k_masked_select_out);
  m.impl("index.Tensor_out", k_index_out);
  m.impl("_index_put_impl_", k_index_put_impl);
  m.impl("gather.out", k_gather_out);
  m.impl("scatter.src_out", k_scatter_src_out);
  m.impl("scatter.value_out", k_scatter_value_out);
  m.impl("scatter.reduce_out", k_scatter_reduce_out);
  m.impl("scatter.value_reduce_out", k_scatter_value_reduce_out);
  m.impl("scatter_add.out", k_scatter_add_out);
  m.impl("scatter_reduce.two_out", k_scatter_reduce_two_out);
  m.impl("index_select", k_index_select);
  m.impl("index_select.out", k_index_select_out);
  m.impl("index_add.out", k_index_add_out);
  m.impl("index_copy.out", k_index_copy_out);
  m.impl("index_reduce.out", k_index_reduce_out);
  m.impl("index_fill_.int_Scalar", k_index_fill_scalar);
  m.impl("index_fill_.int_Tensor", k_index_fill_tensor);
  m.impl("take", k_take);
  m.impl("take.out", k_take_out);
  m.impl("put_", k_put_);
  m.impl("masked_scatter_", k_masked_scatter_);
}

}  // namespace
}  // namespace tpu::aten
