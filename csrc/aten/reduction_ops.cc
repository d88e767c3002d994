// Reductions, scans and softmax: dims are normalised here (PyTorch's wrapping and errors), the
// accumulation dtype follows ATen's rules, and each op is one lowering from lowering/reduction.cc.
#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "aten/tensor_access.h"
#include "aten/type_promotion.h"
#include "host_aten/extreme_kernel.h"
#include "runtime/runtime.h"

namespace tpu::aten {
namespace {

using Dims = std::vector<int64_t>;

// Normalised, sorted reduction dims; an empty or missing list means all dims.
Dims reduction_dims(const at::Tensor& self, at::OptionalIntArrayRef dim) {
  Dims dims;
  const int64_t rank = self.dim();
  if (!dim.has_value() || dim->empty()) {
    for (int64_t i = 0; i < rank; ++i) dims.push_back(i);
    return dims;
  }
  auto mask = at::dim_list_to_bitset(*dim, std::max<int64_t>(rank, 1));
  for (int64_t i = 0; i < std::max<int64_t>(rank, 1); ++i) {
    if (mask[i] && i < rank) dims.push_back(i);
  }
  return dims;
}

void check_nonempty(const at::Tensor& self, const Dims& dims, const char* name) {
  if (self.numel() != 0) return;
  TORCH_CHECK(!dims.empty() || self.dim() != 0 || self.numel() != 0, name,
              "(): Expected reduction dim to be specified for input.numel() == 0.");
  for (int64_t d : dims) {
    TORCH_CHECK_INDEX(self.size(d) != 0, name, "(): Expected reduction dim ", d, " to have non-zero size.");
  }
  TORCH_CHECK(self.dim() > 0 || dims.size() > 0, name, "(): Expected reduction dim to be specified for input.numel() == 0.");
}

OpRunner reducer(const char* lowering, const char* label, const at::Tensor& self, const Dims& dims, bool keepdim,
                 at::ScalarType compute) {
  OpRunner r(lowering, label);
  r.input(self, compute);
  r.attrs().set_ints("dims", dims).set_bool("keepdim", keepdim);
  return r;
}

// ---- sum, mean, prod ---------------------------------------------------------------------

at::ScalarType integral_to_long(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  if (dtype) return *dtype;
  return c10::isIntegralType(self.scalar_type(), /*includeBool=*/true) ? at::kLong : self.scalar_type();
}

at::Tensor accumulate(const char* lowering, const char* label, const at::Tensor& self, at::OptionalIntArrayRef dim,
                      bool keepdim, at::ScalarType out_dtype) {
  OpRunner r = reducer(lowering, label, self, reduction_dims(self, dim), keepdim, accumulate_type(out_dtype));
  r.attrs().set_dtype("out_dtype", element_type(out_dtype));
  return r.run1();
}

at::Tensor k_sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype) {
  return accumulate("sum", "aten::sum", self, dim, keepdim, integral_to_long(self, dtype));
}
at::Tensor& k_sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                      std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return write_out(k_sum_dim(self, dim, keepdim, dtype.value_or(out.scalar_type())), out);
}
at::Tensor k_sum(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return k_sum_dim(self, std::nullopt, false, dtype);
}

at::Tensor k_mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                      std::optional<at::ScalarType> dtype) {
  const at::ScalarType out = dtype.value_or(self.scalar_type());
  TORCH_CHECK(c10::isFloatingType(out) || c10::isComplexType(out), "mean(): could not infer output dtype. ",
              (dtype ? "Optional" : "Input"), " dtype must be either a floating point or complex dtype. Got: ", out);
  return accumulate("mean", "aten::mean", self, dim, keepdim, out);
}
at::Tensor& k_mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                       std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return write_out(k_mean_dim(self, dim, keepdim, dtype.value_or(out.scalar_type())), out);
}
at::Tensor k_mean(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return k_mean_dim(self, std::nullopt, false, dtype);
}

at::Tensor k_prod_dim(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype) {
  const Dims d{at::maybe_wrap_dim(dim, self.dim())};
  return accumulate("prod", "aten::prod", self, self.dim() == 0 ? at::IntArrayRef{} : at::IntArrayRef(d), keepdim,
                    integral_to_long(self, dtype));
}
at::Tensor& k_prod_out(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype,
                       at::Tensor& out) {
  return write_out(k_prod_dim(self, dim, keepdim, dtype.value_or(out.scalar_type())), out);
}
at::Tensor k_prod(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return accumulate("prod", "aten::prod", self, std::nullopt, false, integral_to_long(self, dtype));
}

// ---- extremes and logic ------------------------------------------------------------------

// On the XLA CPU plugin a large float32/float64 amax/amin runs ATen's kernel from inside the
// program (host_aten/extreme_kernel.h: the plugin's own max drops NaNs), marked here so the choice
// is part of the op's key in every mode.
at::Tensor extreme(const char* lowering, const char* label, const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  const Dims dims = reduction_dims(self, dim);
  check_nonempty(self, dims, label + 6);
  OpRunner r = reducer(lowering, label, self, dims, keepdim, self.scalar_type());
  const at::ScalarType t = self.scalar_type();
  if ((t == at::kFloat || t == at::kDouble) && self.numel() >= host_aten::kHostExtremeMinElements &&
      runtime::Runtime::get().has_host_kernel(host_aten::kExtreme)) {
    r.attrs().set_bool("host_kernel", true);
  }
  return r.run1();
}
at::Tensor& k_amax_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  return write_out(extreme("amax", "aten::amax", self, dim, keepdim), out);
}
at::Tensor& k_amin_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  return write_out(extreme("amin", "aten::amin", self, dim, keepdim), out);
}
at::Tensor k_max(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "max(): Expected reduction dim to be specified for input.numel() == 0. "
              "Specify the reduction dim with the 'dim' argument.");
  return extreme("amax", "aten::max", self, {}, false);
}
at::Tensor k_min(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "min(): Expected reduction dim to be specified for input.numel() == 0. "
              "Specify the reduction dim with the 'dim' argument.");
  return extreme("amin", "aten::min", self, {}, false);
}
at::Tensor& k_max_out(const at::Tensor& self, at::Tensor& out) { return write_out(k_max(self), out); }
at::Tensor& k_min_out(const at::Tensor& self, at::Tensor& out) { return write_out(k_min(self), out); }

at::Tensor logic(const char* lowering, const char* label, const at::Tensor& self, at::OptionalIntArrayRef dim,
                 bool keepdim, at::ScalarType out_dtype) {
  OpRunner r = reducer(lowering, label, self, reduction_dims(self, dim), keepdim, self.scalar_type());
  r.attrs().set_dtype("out_dtype", element_type(out_dtype));
  return r.run1();
}
at::Tensor& k_all_all_out(const at::Tensor& self, at::Tensor& out) {
  return write_out(logic("all", "aten::all", self, std::nullopt, false, out.scalar_type()), out);
}
at::Tensor& k_any_all_out(const at::Tensor& self, at::Tensor& out) {
  return write_out(logic("any", "aten::any", self, std::nullopt, false, out.scalar_type()), out);
}
at::Tensor& k_all_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, at::Tensor& out) {
  return write_out(logic("all", "aten::all", self, dim, keepdim, out.scalar_type()), out);
}
at::Tensor& k_any_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, at::Tensor& out) {
  return write_out(logic("any", "aten::any", self, dim, keepdim, out.scalar_type()), out);
}
at::Tensor& k_all_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& out) {
  return k_all_dims_out(self, at::IntArrayRef{dim}, keepdim, out);
}
at::Tensor& k_any_dim_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& out) {
  return k_any_dims_out(self, at::IntArrayRef{dim}, keepdim, out);
}

// ---- arg and value+index reductions ------------------------------------------------------

at::Tensor arg_reduce(const char* lowering, const char* label, const at::Tensor& self, std::optional<int64_t> dim,
                      bool keepdim) {
  OpRunner r(lowering, label);
  r.input(self);
  if (dim.has_value()) {
    const int64_t d = at::maybe_wrap_dim(*dim, self.dim());
    if (self.dim() > 0) {
      TORCH_CHECK_INDEX(self.size(d) != 0, label + 6, "(): Expected reduction dim ", d, " to have non-zero size.");
    }
    r.attrs().set_int("dim", self.dim() == 0 ? 0 : d).set_bool("keepdim", keepdim && self.dim() > 0);
    return r.run1();
  }
  TORCH_CHECK(self.numel() > 0, label + 6, "(): Expected reduction dim to be specified for input.numel() == 0.");
  r.attrs().set_int("dim", 0).set_bool("flatten", true);
  at::Tensor flat = r.run1();
  if (keepdim) return flat.reshape(std::vector<int64_t>(self.dim(), 1));
  return flat;
}
at::Tensor& k_argmax_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, at::Tensor& out) {
  return write_out(arg_reduce("argmax", "aten::argmax", self, dim, keepdim), out);
}
at::Tensor& k_argmin_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, at::Tensor& out) {
  return write_out(arg_reduce("argmin", "aten::argmin", self, dim, keepdim), out);
}

std::tuple<at::Tensor&, at::Tensor&> value_index(const char* lowering, const char* label, const at::Tensor& self,
                                                 int64_t dim, bool keepdim, at::Tensor& values, at::Tensor& indices) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  if (self.dim() == 0) {
    values.resize_({}).copy_(self);
    indices.resize_({}).zero_();
    return {values, indices};
  }
  TORCH_CHECK_INDEX(self.size(d) != 0, label + 6, "(): Expected reduction dim ", d, " to have non-zero size.");
  OpRunner r(lowering, label);
  r.input(self);
  r.attrs().set_int("dim", d).set_bool("keepdim", keepdim);
  auto out = r.run(2);
  write_out(out[0], values);
  write_out(out[1], indices);
  return {values, indices};
}
std::tuple<at::Tensor&, at::Tensor&> k_max_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                   at::Tensor& values, at::Tensor& indices) {
  return value_index("max_dim", "aten::max", self, dim, keepdim, values, indices);
}
std::tuple<at::Tensor&, at::Tensor&> k_min_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                   at::Tensor& values, at::Tensor& indices) {
  return value_index("min_dim", "aten::min", self, dim, keepdim, values, indices);
}
std::tuple<at::Tensor&, at::Tensor&> k_aminmax_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                                                   at::Tensor& min, at::Tensor& max) {
  at::IntArrayRef dims = dim.has_value() ? at::IntArrayRef(*dim) : at::IntArrayRef{};
  write_out(extreme("amin", "aten::aminmax", self, dims, keepdim), min);
  write_out(extreme("amax", "aten::aminmax", self, dims, keepdim), max);
  return {min, max};
}

// ---- statistics and norms ----------------------------------------------------------------

at::Tensor statistic(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction,
                     bool keepdim, bool take_sqrt, bool with_mean, at::Tensor* mean_out) {
  const at::ScalarType t = self.scalar_type();
  TORCH_CHECK(c10::isFloatingType(t) || c10::isComplexType(t), "std and var only support floating point and complex dtypes");
  OpRunner r = reducer("var", take_sqrt ? "aten::std" : "aten::var", self, reduction_dims(self, dim), keepdim,
                       accumulate_type(t));
  r.attrs().set_float("correction", correction ? correction->toDouble() : 1.0);
  r.attrs().set_bool("take_sqrt", take_sqrt).set_bool("with_mean", with_mean);
  // A complex input's variance is real (its mean is complex).
  r.attrs().set_dtype("out_dtype", element_type(c10::toRealValueType(t))).set_dtype("mean_dtype", element_type(t));
  auto outs = r.run(with_mean ? 2 : 1);
  if (mean_out != nullptr) *mean_out = outs[1];
  return outs[0];
}
at::Tensor k_var(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction,
                 bool keepdim) {
  return statistic(self, dim, correction, keepdim, false, false, nullptr);
}
at::Tensor k_std(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction,
                 bool keepdim) {
  return statistic(self, dim, correction, keepdim, true, false, nullptr);
}
at::Tensor& k_var_out(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction,
                      bool keepdim, at::Tensor& out) {
  return write_out(k_var(self, dim, correction, keepdim), out);
}
at::Tensor& k_std_out(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction,
                      bool keepdim, at::Tensor& out) {
  return write_out(k_std(self, dim, correction, keepdim), out);
}
std::tuple<at::Tensor, at::Tensor> k_var_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                              const std::optional<at::Scalar>& correction, bool keepdim) {
  at::Tensor mean;
  at::Tensor var = statistic(self, dim, correction, keepdim, false, true, &mean);
  return {var, mean};
}
std::tuple<at::Tensor, at::Tensor> k_std_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                              const std::optional<at::Scalar>& correction, bool keepdim) {
  at::Tensor mean;
  at::Tensor std = statistic(self, dim, correction, keepdim, true, true, &mean);
  return {std, mean};
}

at::Tensor& k_vector_norm_out(const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim,
                              bool keepdim, std::optional<at::ScalarType> dtype, at::Tensor& out) {
  const at::ScalarType in = dtype.value_or(self.scalar_type());
  TORCH_CHECK(c10::isFloatingType(in) || c10::isComplexType(in),
              "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ", in);
  OpRunner r = reducer("vector_norm", "aten::linalg_vector_norm", self, reduction_dims(self, dim), keepdim,
                       accumulate_type(in));
  r.attrs().set_float("ord", ord.toDouble()).set_dtype("out_dtype", element_type(out.scalar_type()));
  return write_out(r.run1(), out);
}

at::Tensor k_logsumexp(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  const at::ScalarType t = integral_to_float(self.scalar_type());
  OpRunner r = reducer("logsumexp", "aten::logsumexp", self, reduction_dims(self, dim), keepdim, accumulate_type(t));
  r.attrs().set_dtype("out_dtype", element_type(t));
  return r.run1();
}
at::Tensor& k_logsumexp_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) {
  return write_out(k_logsumexp(self, dim, keepdim), out);
}

at::Tensor k_count_nonzero(const at::Tensor& self, at::IntArrayRef dim) {
  return k_sum_dim(self.ne(0), dim, false, at::kLong);
}

// ---- scans ---------------------------------------------------------------------------------

at::Tensor scan(const char* lowering, const char* label, const at::Tensor& self, int64_t dim,
                at::ScalarType dtype) {
  OpRunner r(lowering, label);
  r.input(self, dtype);
  r.attrs().set_int("dim", at::maybe_wrap_dim(dim, self.dim()));
  return r.run1();
}
at::Tensor& k_cumsum_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return write_out(scan("cumsum", "aten::cumsum", self, dim, dtype.value_or(out.scalar_type())), out);
}
at::Tensor& k_cumprod_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return write_out(scan("cumprod", "aten::cumprod", self, dim, dtype.value_or(out.scalar_type())), out);
}
void cum_extreme(const char* lowering, const char* label, const at::Tensor& self, at::Tensor& values,
                 at::Tensor& indices, int64_t dim) {
  OpRunner r(lowering, label);
  r.input(self);
  r.attrs().set_int("dim", at::maybe_wrap_dim(dim, self.dim()));
  auto out = r.run(2);
  write_out(out[0], values);
  write_out(out[1], indices);
}
void k_cummax_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  cum_extreme("cummax", "aten::cummax", self, values, indices, dim);
}
void k_cummin_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  cum_extreme("cummin", "aten::cummin", self, values, indices, dim);
}

// ---- softmax -------------------------------------------------------------------------------

at::Tensor softmax_like(const char* lowering, const char* label, const at::Tensor& self, int64_t dim,
                        at::ScalarType out_dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(self.numel() == 0 || c10::isFloatingType(self.scalar_type()) ||
                                  c10::isComplexType(self.scalar_type()),
                              "\"", lowering, "\" not implemented for '", c10::toString(self.scalar_type()), "'");
  if (self.numel() == 0) return at::empty_like(self, self.options().dtype(out_dtype));  // nothing to compute
  OpRunner r(lowering, label);
  r.input(self, accumulate_type(out_dtype));
  r.attrs().set_int("dim", at::maybe_wrap_dim(dim, self.dim()));
  at::Tensor result = r.run1();
  return result.scalar_type() == out_dtype ? result : result.to(out_dtype);
}
at::ScalarType softmax_dtype(const at::Tensor& self, bool half_to_float) {
  return half_to_float ? at::kFloat : self.scalar_type();
}
at::Tensor& k_softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  return write_out(softmax_like("softmax", "aten::_softmax", self, dim, softmax_dtype(self, half_to_float)), out);
}
at::Tensor& k_log_softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  return write_out(softmax_like("log_softmax", "aten::_log_softmax", self, dim, softmax_dtype(self, half_to_float)),
                   out);
}
at::Tensor softmax_grad(const char* lowering, const char* label, const at::Tensor& grad, const at::Tensor& output,
                        int64_t dim, at::ScalarType input_dtype) {
  OpRunner r(lowering, label);
  const at::ScalarType compute = accumulate_type(grad.scalar_type());
  r.input(grad, compute).input(output, compute);
  r.attrs().set_int("dim", at::maybe_wrap_dim(dim, grad.dim()));
  at::Tensor result = r.run1();
  return result.scalar_type() == input_dtype ? result : result.to(input_dtype);
}
at::Tensor& k_softmax_backward_out(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                   at::ScalarType input_dtype, at::Tensor& out) {
  return write_out(softmax_grad("softmax_backward", "aten::_softmax_backward_data", grad, output, dim, input_dtype), out);
}
at::Tensor& k_log_softmax_backward_out(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                                       at::ScalarType input_dtype, at::Tensor& out) {
  return write_out(
      softmax_grad("log_softmax_backward", "aten::_log_softmax_backward_data", grad, output, dim, input_dtype), out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sum.dim_IntList", k_sum_dim);
  m.impl("sum.IntList_out", k_sum_out);
  m.impl("sum", k_sum);
  m.impl("mean.dim", k_mean_dim);
  m.impl("mean.out", k_mean_out);
  m.impl("mean", k_mean);
  m.impl("prod", k_prod);
  m.impl("prod.dim_int", k_prod_dim);
  m.impl("prod.int_out", k_prod_out);
  m.impl("amax.out", k_amax_out);
  m.impl("amin.out", k_amin_out);
  m.impl("max", k_max);
  m.impl("min", k_min);
  m.impl("max.unary_out", k_max_out);
  m.impl("min.unary_out", k_min_out);
  m.impl("all.all_out", k_all_all_out);
  m.impl("any.all_out", k_any_all_out);
  m.impl("all.dims_out", k_all_dims_out);
  m.impl("any.dims_out", k_any_dims_out);
  m.impl("all.out", k_all_dim_out);
  m.impl("any.out", k_any_dim_out);
  m.impl("argmax.out", k_argmax_out);
  m.impl("argmin.out", k_argmin_out);
  m.impl("max.dim_max", k_max_dim_out);
  m.impl("min.dim_min", k_min_dim_out);
  m.impl("aminmax.out", k_aminmax_out);
  m.impl("var.correction", k_var);
  m.impl("std.correction", k_std);
  m.impl("var.correction_out", k_var_out);
  m.impl("std.correction_out", k_std_out);
  m.impl("var_mean.correction", k_var_mean);
  m.impl("std_mean.correction", k_std_mean);
  m.impl("linalg_vector_norm.out", k_vector_norm_out);
  m.impl("logsumexp", k_logsumexp);
  m.impl("logsumexp.out", k_logsumexp_out);
  m.impl("count_nonzero.dim_IntList", k_count_nonzero);
  m.impl("cumsum.out", k_cumsum_out);
  m.impl("cumprod.out", k_cumprod_out);
  m.impl("_cummax_helper", k_cummax_helper);
  m.impl("_cummin_helper", k_cummin_helper);
  m.impl("_softmax.out", k_softmax_out);
  m.impl("_log_softmax.out", k_log_softmax_out);
  m.impl("_softmax_backward_data.out", k_softmax_backward_out);
  m.impl("_log_softmax_backward_data.out", k_log_softmax_backward_out);
}

}  // namespace
}  // namespace tpu::aten
