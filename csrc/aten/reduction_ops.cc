// sum and mean over dimensions.
#include <ATen/WrapDimUtilsMulti.h>
#include <torch/library.h>

#include <algorithm>

#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "aten/out_variants.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

// Normalised, sorted reduction dims; an empty or missing list means all dims.
std::vector<int64_t> reduction_dims(const at::Tensor& self, at::OptionalIntArrayRef dim) {
  std::vector<int64_t> dims;
  const int64_t rank = self.dim();
  if (!dim.has_value() || dim->empty()) {
    for (int64_t i = 0; i < rank; ++i) dims.push_back(i);
    return dims;
  }
  auto mask = at::dim_list_to_bitset(*dim, rank);
  for (int64_t i = 0; i < rank; ++i) {
    if (mask[i]) dims.push_back(i);
  }
  return dims;
}

at::Tensor reduce(const char* lowering, const char* label, const at::Tensor& self,
                  at::OptionalIntArrayRef dim, bool keepdim, at::ScalarType out_dtype) {
  OpRunner r(lowering, label);
  r.input(self, accumulate_type(out_dtype));
  r.attrs().set_ints("dims", reduction_dims(self, dim));
  r.attrs().set_bool("keepdim", keepdim);
  r.attrs().set_dtype("out_dtype", element_type(out_dtype));
  return r.run1();
}

at::ScalarType sum_dtype(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  if (dtype) return *dtype;
  return c10::isIntegralType(self.scalar_type(), /*includeBool=*/true) ? at::kLong : self.scalar_type();
}

at::Tensor k_sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                   std::optional<at::ScalarType> dtype) {
  return reduce("sum", "aten::sum", self, dim, keepdim, sum_dtype(self, dtype));
}
at::Tensor& k_sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return write_out(k_sum_dim(self, dim, keepdim, dtype ? dtype : std::optional<at::ScalarType>(out.scalar_type())), out);
}
at::Tensor k_sum_all(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return k_sum_dim(self, std::nullopt, false, dtype);
}

at::Tensor k_mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  const at::ScalarType out = dtype.value_or(self.scalar_type());
  TORCH_CHECK(c10::isFloatingType(out),
              "mean(): could not infer output dtype. ",
              (dtype ? "Optional" : "Input"), " dtype must be either a floating point or complex dtype. ",
              "Got: ", out);
  return reduce("mean", "aten::mean", self, dim, keepdim, out);
}
at::Tensor& k_mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return write_out(k_mean_dim(self, dim, keepdim, dtype ? dtype : std::optional<at::ScalarType>(out.scalar_type())), out);
}
at::Tensor k_mean_all(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return k_mean_dim(self, std::nullopt, false, dtype);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sum.dim_IntList", k_sum_dim);
  m.impl("sum.IntList_out", k_sum_out);
  m.impl("sum", k_sum_all);
  m.impl("mean.dim", k_mean_dim);
  m.impl("mean.out", k_mean_out);
  m.impl("mean", k_mean_all);
}

}  // namespace
}  // namespace tpu::aten
