// Ops assembled from other tpu ops in C++ (nansum, vdot, equal, addbmm, baddbmm, norm,
// kthvalue, median, log_sigmoid) and thin kernels over lowering/search.cc
// (searchsorted, bucketize, isin, bincount, histc, cdist, cross, max_unpool, logcumsumexp).
#include <cmath>

#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "aten/tensor_access.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

at::Tensor& k_nansum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                         std::optional<at::ScalarType> dtype, at::Tensor& out) {
  at::Tensor clean = c10::isFloatingType(self.scalar_type()) ? at::where(self.isnan(), at::zeros({}, self.options()), self)
                                                             : self;
  return write_out(at::sum(clean, dim, keepdim, dtype.has_value() ? dtype : std::optional<at::ScalarType>(out.scalar_type())), out);
}
at::Tensor k_nansum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  at::Tensor clean = c10::isFloatingType(self.scalar_type()) ? at::where(self.isnan(), at::zeros({}, self.options()), self)
                                                             : self;
  return at::sum(clean, dim, keepdim, dtype);
}

// vdot conjugates its first argument (a lazy conj view: OpRunner resolves it).
at::Tensor k_vdot(const at::Tensor& self, const at::Tensor& other) { return at::dot(self.conj(), other); }

bool k_equal(const at::Tensor& self, const at::Tensor& other) {
  if (self.sizes() != other.sizes()) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

at::Tensor& k_baddbmm_out(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const at::Scalar& beta,
                          const at::Scalar& alpha, at::Tensor& out) {
  at::Tensor prod = at::bmm(b1, b2);
  if (!is_one(alpha)) prod = prod * alpha;
  at::Tensor result = is_zero(beta) ? prod : (is_one(beta) ? self + prod : self * beta + prod);
  return write_out(result.expand(prod.sizes()), out);
}
at::Tensor k_addbmm(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const at::Scalar& beta,
                    const at::Scalar& alpha) {
  at::Tensor prod = at::bmm(b1, b2).sum(0);
  if (!is_one(alpha)) prod = prod * alpha;
  return is_zero(beta) ? prod : (is_one(beta) ? self + prod : self * beta + prod);
}
at::Tensor& k_addbmm_out(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const at::Scalar& beta,
                         const at::Scalar& alpha, at::Tensor& out) {
  return write_out(k_addbmm(self, b1, b2, beta, alpha), out);
}

at::Tensor& k_norm_out(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                       at::Tensor& out) {
  return write_out(at::linalg_vector_norm(self, p.value_or(2), dim, keepdim), out);
}
at::Tensor& k_norm_dtype_out(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim,
                             bool keepdim, at::ScalarType dtype, at::Tensor& out) {
  return write_out(at::linalg_vector_norm(self, p.value_or(2), dim, keepdim, dtype), out);
}

std::tuple<at::Tensor&, at::Tensor&> k_kthvalue_out(const at::Tensor& self, int64_t k, int64_t dim, bool keepdim,
                                                    at::Tensor& values, at::Tensor& indices) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const int64_t n = self.dim() == 0 ? 1 : self.size(d);
  TORCH_CHECK(k >= 1 && k <= n, "kthvalue(): selected number k out of range for dimension ", d);
  if (self.dim() == 0) {
    write_out(self.clone(), values);
    write_out(at::zeros({}, self.options().dtype(at::kLong)), indices);
    return {values, indices};
  }
  auto [sv, si] = at::sort(self, d);
  at::Tensor v = sv.narrow(d, k - 1, 1), i = si.narrow(d, k - 1, 1);
  write_out(keepdim ? v : v.squeeze(d), values);
  write_out(keepdim ? i : i.squeeze(d), indices);
  return {values, indices};
}

// median / nanmedian along dim: the lower median; a NaN in the slice makes median NaN.
std::tuple<at::Tensor, at::Tensor> median_impl(const at::Tensor& self, int64_t dim, bool keepdim, bool ignore_nan) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  if (self.dim() == 0) return {self.clone(), at::zeros({}, self.options().dtype(at::kLong))};
  TORCH_CHECK_INDEX(self.size(d) > 0, "median(): Expected reduction dim ", d, " to have non-zero size.");
  auto [sv, si] = at::sort(self, d);
  const int64_t n = self.size(d);
  at::Tensor nan_count = self.isnan().sum(d, /*keepdim=*/true);
  at::Tensor pos;
  if (ignore_nan) {
    at::Tensor valid = (nan_count * -1 + n - 1).clamp_min(0);
    pos = at::div(valid, 2, "floor");
  } else {
    at::Tensor k = at::full_like(nan_count, (n - 1) / 2);
    pos = at::where(nan_count > 0, nan_count * -1 + n, k);
  }
  at::Tensor v = sv.gather(d, pos), i = si.gather(d, pos);
  if (!keepdim) {
    v = v.squeeze(d);
    i = i.squeeze(d);
  }
  return {v, i};
}
std::tuple<at::Tensor&, at::Tensor&> k_median_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                      at::Tensor& values, at::Tensor& indices) {
  auto [v, i] = median_impl(self, dim, keepdim, false);
  write_out(v, values);
  write_out(i, indices);
  return {values, indices};
}
std::tuple<at::Tensor&, at::Tensor&> k_nanmedian_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                         at::Tensor& values, at::Tensor& indices) {
  auto [v, i] = median_impl(self, dim, keepdim, true);
  write_out(v, values);
  write_out(i, indices);
  return {values, indices};
}
at::Tensor k_median(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "median() input tensor cannot be empty");
  return std::get<0>(median_impl(self.reshape({-1}), 0, false, false));
}
at::Tensor k_nanmedian(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "nanmedian() input tensor cannot be empty");
  return std::get<0>(median_impl(self.reshape({-1}), 0, false, true));
}

std::tuple<at::Tensor, at::Tensor> k_log_sigmoid_forward(const at::Tensor& self) {
  at::Tensor out = OpRunner("log_sigmoid", "aten::log_sigmoid_forward").input(self).run1();
  return {out, at::zeros_like(self)};
}
std::tuple<at::Tensor&, at::Tensor&> k_log_sigmoid_forward_out(const at::Tensor& self, at::Tensor& output,
                                                               at::Tensor& buffer) {
  auto [o, b] = k_log_sigmoid_forward(self);
  write_out(o, output);
  write_out(b, buffer);
  return {output, buffer};
}

at::Tensor& searchsorted(const at::Tensor& seq, const at::Tensor& values, bool out_int32, bool right,
                         at::Tensor& out) {
  TORCH_CHECK(seq.dim() == 1 || seq.sizes().slice(0, seq.dim() - 1) == values.sizes().slice(0, values.dim() - 1),
              "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of "
              "boundaries tensor and input value tensor must match");
  OpRunner r("searchsorted", "aten::searchsorted");
  const at::ScalarType t = promote(seq, values);
  r.input(seq, t).input(values, t);
  r.attrs().set_bool("right", right).set_bool("out_int32", out_int32);
  return write_out(r.run1(), out);
}
at::Tensor& k_searchsorted_out(const at::Tensor& seq, const at::Tensor& self, bool out_int32, bool right,
                               std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter,
                               at::Tensor& out) {
  const bool r = side.has_value() ? *side == "right" : right;
  if (sorter.has_value() && sorter->defined()) return searchsorted(seq.gather(-1, *sorter), self, out_int32, r, out);
  return searchsorted(seq, self, out_int32, r, out);
}
at::Tensor k_searchsorted(const at::Tensor& seq, const at::Tensor& self, bool out_int32, bool right,
                          std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  at::Tensor out = at::empty({0}, self.options().dtype(out_int32 ? at::kInt : at::kLong));
  return k_searchsorted_out(seq, self, out_int32, right, side, sorter, out);
}
at::Tensor k_searchsorted_scalar(const at::Tensor& seq, const at::Scalar& self, bool out_int32, bool right,
                                 std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  return k_searchsorted(seq, at::scalar_tensor(self, seq.options()), out_int32, right, side, sorter);
}
at::Tensor& k_searchsorted_scalar_out(const at::Tensor& seq, const at::Scalar& self, bool out_int32, bool right,
                                      std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter,
                                      at::Tensor& out) {
  return k_searchsorted_out(seq, at::scalar_tensor(self, seq.options()), out_int32, right, side, sorter, out);
}
at::Tensor& k_bucketize_out(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right,
                            at::Tensor& out) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
  return searchsorted(boundaries, self, out_int32, right, out);
}

at::Tensor k_bucketize(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  at::Tensor out = at::empty({0}, self.options().dtype(out_int32 ? at::kInt : at::kLong));
  return k_bucketize_out(self, boundaries, out_int32, right, out);
}

at::Tensor& k_isin_out(const at::Tensor& elements, const at::Tensor& test, bool assume_unique, bool invert,
                       at::Tensor& out) {
  OpRunner r("isin", "aten::isin");
  const at::ScalarType t = promote(elements, test);
  r.input(elements, t).input(test.device() == elements.device() ? test : test.to(elements.device()), t);
  r.attrs().set_bool("invert", invert);
  return write_out(r.run1(), out);
}

at::Tensor k_bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength) {
  TORCH_CHECK(self.dim() == 1 && !c10::isFloatingType(self.scalar_type()), "bincount only supports 1-d non-negative integral inputs.");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  const int64_t size = std::max<int64_t>(self.numel() > 0 ? self.max().item<int64_t>() + 1 : 0, minlength);
  OpRunner r("bincount", "aten::bincount");
  r.input(self, at::kLong);
  if (weights.has_value() && weights->defined()) {
    r.input(*weights, weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble);
  }
  r.attrs().set_int("size", size);
  return r.run1();
}

at::Tensor k_histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  TORCH_CHECK(bins > 0, "torch.histc: bins must be > 0, but got ", bins, " for bins");
  double lo = min.toDouble(), hi = max.toDouble();
  if (at::isIntegralType(self.scalar_type(), /*includeBool=*/false)) {  // CUDA casts the range to the input type
    lo = std::trunc(lo);
    hi = std::trunc(hi);
  }
  if (lo == hi && self.numel() > 0) {
    lo = self.min().item<double>();
    hi = self.max().item<double>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
  OpRunner r("histc", "aten::histc");
  r.input(self);
  r.attrs().set_int("bins", bins).set_float("min", lo).set_float("max", hi);
  return r.run1();
}
at::Tensor& k_histc_out(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max,
                        at::Tensor& out) {
  return write_out(k_histc(self, bins, min, max), out);
}

at::Tensor k_cdist_forward(const at::Tensor& x1, const at::Tensor& x2, double p, std::optional<int64_t> mode) {
  TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
  TORCH_CHECK(x1.dim() >= 2 && x2.dim() >= 2, "cdist only supports at least 2D tensors");
  // Broadcast the batch dims of both inputs.
  auto batch = at::infer_size(x1.sizes().slice(0, x1.dim() - 2), x2.sizes().slice(0, x2.dim() - 2));
  std::vector<int64_t> s1(batch.begin(), batch.end()), s2(batch.begin(), batch.end());
  s1.insert(s1.end(), x1.sizes().end() - 2, x1.sizes().end());
  s2.insert(s2.end(), x2.sizes().end() - 2, x2.sizes().end());
  OpRunner r("cdist", "aten::_cdist_forward");
  r.input(x1.expand(s1)).input(x2.expand(s2), x1.scalar_type());
  r.attrs().set_float("p", p);
  return r.run1();
}

at::Tensor& k_linalg_cross_out(const at::Tensor& self, const at::Tensor& other, int64_t dim, at::Tensor& out) {
  const auto shape = at::infer_size(self.sizes(), other.sizes());
  const int64_t d = at::maybe_wrap_dim(dim, static_cast<int64_t>(shape.size()));
  TORCH_CHECK(shape[d] == 3, "linalg.cross: inputs dimension ", dim, " must have length 3. Got ", self.size(dim),
              " and ", other.size(dim));
  OpRunner r("cross", "aten::linalg_cross");
  const at::ScalarType t = promote(self, other);
  r.input(self, t).input(other, t).attrs().set_int("dim", d);
  return write_out(r.run1(), out);
}

at::Tensor max_unpool(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size) {
  OpRunner r("max_unpool", "aten::max_unpool");
  r.input(self).input(indices, at::kLong);
  r.attrs().set_ints("output", std::vector<int64_t>(output_size.begin(), output_size.end()));
  return r.run1();
}
at::Tensor k_max_unpool2d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size) {
  return max_unpool(self, indices, output_size);
}
at::Tensor k_max_unpool3d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                          at::IntArrayRef, at::IntArrayRef) {
  return max_unpool(self, indices, output_size);
}

at::Tensor& k_logcumsumexp_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  OpRunner r("logcumsumexp", "aten::logcumsumexp");
  r.input(self, accumulate_type(out.scalar_type()));
  r.attrs().set_int("dim", at::maybe_wrap_dim(dim, self.dim()));
  return write_out(r.run1().to(out.scalar_type()), out);
}

at::Tensor k_logcumsumexp(const at::Tensor& self, int64_t dim) {
  at::Tensor out = at::empty({0}, self.options());
  return k_logcumsumexp_out(self, dim, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nansum", k_nansum);
  m.impl("nansum.out", k_nansum_out);
  m.impl("vdot", k_vdot);
  m.impl("equal", k_equal);
  m.impl("baddbmm.out", k_baddbmm_out);
  m.impl("addbmm", k_addbmm);
  m.impl("addbmm.out", k_addbmm_out);
  m.impl("norm.out", k_norm_out);
  m.impl("norm.dtype_out", k_norm_dtype_out);
  m.impl("kthvalue.values", k_kthvalue_out);
  m.impl("median.dim_values", k_median_dim_out);
  m.impl("nanmedian.dim_values", k_nanmedian_dim_out);
  m.impl("median", k_median);
  m.impl("nanmedian", k_nanmedian);
  m.impl("log_sigmoid_forward", k_log_sigmoid_forward);
  m.impl("log_sigmoid_forward.output", k_log_sigmoid_forward_out);
  m.impl("searchsorted.Tensor_out", k_searchsorted_out);
  m.impl("searchsorted.Tensor", k_searchsorted);
  m.impl("searchsorted.Scalar", k_searchsorted_scalar);
  m.impl("searchsorted.Scalar_out", k_searchsorted_scalar_out);
  m.impl("bucketize.Tensor", k_bucketize);
  m.impl("_logcumsumexp", k_logcumsumexp);
  m.impl("_logcumsumexp.out", k_logcumsumexp_out);
  m.impl("bucketize.Tensor_out", k_bucketize_out);
  m.impl("isin.Tensor_Tensor_out", k_isin_out);
  m.impl("bincount", k_bincount);
  m.impl("histc", k_histc);
  m.impl("histc.out", k_histc_out);
  m.impl("_cdist_forward", k_cdist_forward);
  m.impl("linalg_cross.out", k_linalg_cross_out);
  m.impl("max_unpool2d", k_max_unpool2d);
  m.impl("max_unpool3d", k_max_unpool3d);
}

}  // namespace
}  // namespace tpu::aten
