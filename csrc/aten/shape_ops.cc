// Data movement that is not a view: cat, flip, roll, tril/triu, constant padding, sort, topk.
#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "aten/tensor_access.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

at::Tensor& k_cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  std::vector<at::Tensor> inputs;
  for (const at::Tensor& t : tensors) {
    // PyTorch skips legacy empty tensors of shape [0] in cat.
    if (t.dim() == 1 && t.numel() == 0) continue;
    inputs.push_back(t);
  }
  if (inputs.empty()) {
    at::native::resize_output(out, {0});
    return out;
  }
  const int64_t d = at::maybe_wrap_dim(dim, inputs[0].dim());
  std::vector<int64_t> shape(inputs[0].sizes().begin(), inputs[0].sizes().end());
  shape[d] = 0;
  for (const at::Tensor& t : inputs) shape[d] += t.size(d);
  OpRunner r("cat", "aten::cat");
  for (const at::Tensor& t : inputs) r.input(t, out.scalar_type());
  r.attrs().set_int("dim", d);
  at::native::resize_output(out, shape);
  r.run_into(out);
  return out;
}

at::Tensor k_flip(const at::Tensor& self, at::IntArrayRef dims) {
  auto mask = at::dim_list_to_bitset(dims, std::max<int64_t>(self.dim(), 1));
  std::vector<int64_t> d;
  for (int64_t i = 0; i < self.dim(); ++i) if (mask[i]) d.push_back(i);
  OpRunner r("flip", "aten::flip");
  r.input(self).attrs().set_ints("dims", d);
  return r.run1();
}
at::Tensor& k_flip_out(const at::Tensor& self, at::IntArrayRef dims, at::Tensor& out) {
  return write_out(k_flip(self, dims), out);
}

at::Tensor k_roll(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  TORCH_CHECK(dims.empty() ? shifts.size() == 1 : shifts.size() == dims.size(),
              "shifts and dimensions must align. shifts: ", shifts.size(), ", dims:", dims.size());
  std::vector<int64_t> d;
  for (int64_t x : dims) d.push_back(at::maybe_wrap_dim(x, self.dim()));
  OpRunner r("roll", "aten::roll");
  r.input(self).attrs().set_ints("shifts", std::vector<int64_t>(shifts.begin(), shifts.end())).set_ints("dims", d);
  return r.run1();
}
at::Tensor& k_roll_out(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims, at::Tensor& out) {
  return write_out(k_roll(self, shifts, dims), out);
}

at::Tensor& triangle(const at::Tensor& self, int64_t diagonal, bool upper, at::Tensor& out) {
  TORCH_CHECK(self.dim() >= 2, upper ? "triu" : "tril", ": input tensor must have at least 2 dimensions");
  OpRunner r("triangle", upper ? "aten::triu" : "aten::tril");
  r.input(self).attrs().set_int("diagonal", diagonal).set_bool("upper", upper);
  return write_out(r.run1(), out);
}
at::Tensor& k_tril_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
  return triangle(self, diagonal, false, out);
}
at::Tensor& k_triu_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {
  return triangle(self, diagonal, true, out);
}

at::Tensor k_constant_pad_nd(const at::Tensor& self, at::IntArrayRef pad, const at::Scalar& value) {
  TORCH_CHECK(pad.size() % 2 == 0, "Length of pad must be even but instead it equals ", pad.size());
  const int64_t n = static_cast<int64_t>(pad.size()) / 2;
  TORCH_CHECK(n <= self.dim(), "Length of pad should be no more than twice the number of dimensions of the input. "
              "Pad length is ", pad.size(), " while the input has ", self.dim(), " dimensions.");
  std::vector<int64_t> low(self.dim(), 0), high(self.dim(), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = self.dim() - 1 - i;
    low[d] = pad[2 * i];
    high[d] = pad[2 * i + 1];
    const int64_t size = self.size(d) + low[d] + high[d];
    TORCH_CHECK(size >= 0, "The input size ", self.size(d), ", plus negative padding ", low[d], " and ", high[d],
                " resulted in a negative output size, which is invalid. Check dimension ", d, " of your input.");
  }
  OpRunner r("pad_constant", "aten::constant_pad_nd");
  r.input(self).scalar(value, self.scalar_type());
  r.attrs().set_ints("low", low).set_ints("high", high);
  return r.run1();
}

std::tuple<at::Tensor&, at::Tensor&> k_sort_out(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                                bool descending, at::Tensor& values, at::Tensor& indices) {
  OpRunner r("sort", "aten::sort");
  r.input(self).attrs().set_int("dim", at::maybe_wrap_dim(dim, self.dim())).set_bool("descending", descending);
  auto out = r.run(2);
  write_out(out[0], values);
  write_out(out[1], indices);
  return {values, indices};
}

std::tuple<at::Tensor&, at::Tensor&> k_topk_out(const at::Tensor& self, int64_t k, int64_t dim, bool largest,
                                                bool sorted, at::Tensor& values, at::Tensor& indices) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(k >= 0 && k <= (self.dim() > 0 ? self.size(d) : 1), "selected index k out of range");
  OpRunner r("topk", "aten::topk");
  r.input(self).attrs().set_int("k", k).set_int("dim", d).set_bool("largest", largest);
  auto out = r.run(2);
  write_out(out[0], values);
  write_out(out[1], indices);
  return {values, indices};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cat.out", k_cat_out);
  m.impl("flip", k_flip);
  m.impl("flip.out", k_flip_out);
  m.impl("roll", k_roll);
  m.impl("roll.out", k_roll_out);
  m.impl("tril.out", k_tril_out);
  m.impl("triu.out", k_triu_out);
  m.impl("constant_pad_nd", k_constant_pad_nd);
  m.impl("sort.values_stable", k_sort_out);
  m.impl("topk.values", k_topk_out);
}

}  // namespace
}  // namespace tpu::aten
