// Less common NN and tensor ops: reflect/replicate padding, GLU, PReLU, im2col/col2im, renorm,
// mode, frexp, pdist, multi-margin losses, adaptive max pooling, nonzero_static, trace,
// channel_shuffle, repeat_interleave. Their lowerings live in lowering/misc_nn.cc.
#include <ATen/ops/arange.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/searchsorted.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "aten/tensor_access.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

using Dims = std::vector<int64_t>;

Dims to_dims(c10::SymIntArrayRef v) {
  Dims d;
  for (const auto& s : v) d.push_back(s.guard_int(__FILE__, __LINE__));
  return d;
}

// ---- reflection / replication padding --------------------------------------------------------

at::Tensor pad_index(const at::Tensor& self, const Dims& pads, const char* mode, const char* label) {
  const int64_t spatial = static_cast<int64_t>(pads.size() / 2);
  TORCH_CHECK(self.dim() == spatial + 1 || self.dim() == spatial + 2, label, ": expected ", spatial + 1, "D or ",
              spatial + 2, "D input, but got a ", self.dim(), "D tensor of shape ", self.sizes());
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t dim = self.dim() - 1 - i, n = self.size(dim);
    const int64_t lo = pads[2 * i], hi = pads[2 * i + 1];
    if (std::string(mode) == "reflect") {
      TORCH_CHECK(lo < n && hi < n, label, ": padding size should be less than the corresponding input dimension, but got padding (",
                  lo, ", ", hi, ") at dimension ", dim, " of input ", self.sizes(), ". Use a smaller padding or mode='replicate'.");
    }
    TORCH_CHECK(n > 0, label, ": input dimension ", dim, " is empty; padding needs at least one element there");
    TORCH_CHECK(n + lo + hi > 0, label, ": padding (", lo, ", ", hi, ") at dimension ", dim, " of input ", self.sizes(),
                " leaves no elements; use a smaller negative padding");
  }
  OpRunner r("pad_index", label);
  r.input(self);
  r.attrs().set_string("mode", mode).set_ints("pads", pads);
  return r.run1();
}

at::Tensor pad_index_backward(const at::Tensor& grad, const at::Tensor& self, const Dims& pads, const char* mode,
                              const char* label) {
  OpRunner r("pad_index_backward", label);
  r.input(grad, accumulate_type(grad.scalar_type()));
  r.attrs().set_string("mode", mode).set_ints("pads", pads).set_ints("input_size", Dims(self.sizes().begin(), self.sizes().end()));
  return r.run1().to(grad.scalar_type());
}

template <const char* kMode, const char* kLabel>
at::Tensor& k_pad_out(const at::Tensor& self, c10::SymIntArrayRef padding, at::Tensor& out) {
  return write_out(pad_index(self, to_dims(padding), kMode, kLabel), out);
}
template <const char* kMode, const char* kLabel>
at::Tensor& k_pad_backward_out(const at::Tensor& grad, const at::Tensor& self, c10::SymIntArrayRef padding,
                               at::Tensor& grad_input) {
  return write_out(pad_index_backward(grad, self, to_dims(padding), kMode, kLabel), grad_input);
}
template <const char* kMode, const char* kLabel>
at::Tensor k_pad(const at::Tensor& self, c10::SymIntArrayRef padding) {
  return pad_index(self, to_dims(padding), kMode, kLabel);
}
template <const char* kMode, const char* kLabel>
at::Tensor k_pad_backward(const at::Tensor& grad, const at::Tensor& self, c10::SymIntArrayRef padding) {
  return pad_index_backward(grad, self, to_dims(padding), kMode, kLabel);
}

constexpr char kReflect[] = "reflect";
constexpr char kReplicate[] = "replicate";
constexpr char kReflect1[] = "aten::reflection_pad1d";
constexpr char kReflect2[] = "aten::reflection_pad2d";
constexpr char kReflect3[] = "aten::reflection_pad3d";
constexpr char kReplicate1[] = "aten::replication_pad1d";
constexpr char kReplicate2[] = "aten::replication_pad2d";
constexpr char kReplicate3[] = "aten::replication_pad3d";

// ---- GLU, PReLU -------------------------------------------------------------------------------

at::Tensor& k_glu_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  TORCH_CHECK(self.dim() > 0, "glu does not support scalars because halving size must be even");
  dim = c10::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(self.size(dim) % 2 == 0, "Halving dimension must be even, but dimension ", dim, " is size ", self.size(dim));
  OpRunner r("glu", "aten::glu");
  r.input(self);
  r.attrs().set_int("dim", dim);
  return write_out(r.run1(), out);
}

at::Tensor& k_glu_backward_out(const at::Tensor& grad, const at::Tensor& self, int64_t dim, at::Tensor& grad_input) {
  OpRunner r("glu_backward", "aten::glu_backward");
  r.input(grad).input(self);
  r.attrs().set_int("dim", c10::maybe_wrap_dim(dim, self.dim()));
  return write_out(r.run1(), grad_input);
}

at::Tensor k_glu_backward(const at::Tensor& grad, const at::Tensor& self, int64_t dim) {
  at::Tensor out = at::empty({0}, self.options());
  return k_glu_backward_out(grad, self, dim, out);
}

at::Tensor k_prelu(const at::Tensor& self, const at::Tensor& weight) {
  OpRunner r("prelu", "aten::_prelu_kernel");
  r.input(self).input(weight, self.scalar_type());
  return r.run1();
}

std::tuple<at::Tensor, at::Tensor> k_prelu_backward(const at::Tensor& grad, const at::Tensor& self,
                                                    const at::Tensor& weight) {
  OpRunner r("prelu_backward", "aten::_prelu_kernel_backward");
  r.input(grad, self.scalar_type()).input(self).input(weight, self.scalar_type());
  auto out = r.run(2);
  return {out[0], out[1].to(weight.scalar_type())};
}

// ---- im2col / col2im --------------------------------------------------------------------------

void patch_attrs(OpRunner& r, at::IntArrayRef kernel, at::IntArrayRef dilation, at::IntArrayRef padding,
                 at::IntArrayRef stride) {
  for (auto [name, v] : {std::pair{"kernel", kernel}, {"dilation", dilation}, {"padding", padding}, {"stride", stride}}) {
    TORCH_CHECK(v.size() == 2, "im2col/col2im: ", name, " must have 2 elements, got ", v.size());
  }
  r.attrs()
      .set_ints("kernel", Dims(kernel.begin(), kernel.end()))
      .set_ints("dilation", Dims(dilation.begin(), dilation.end()))
      .set_ints("padding", Dims(padding.begin(), padding.end()))
      .set_ints("stride", Dims(stride.begin(), stride.end()));
}

at::Tensor& k_im2col_out(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef dilation,
                         at::IntArrayRef padding, at::IntArrayRef stride, at::Tensor& out) {
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, "im2col: expected 3D or 4D input, got ", self.sizes());
  const bool batched = self.dim() == 4;
  OpRunner r("im2col", "aten::im2col");
  r.input(batched ? self : self.unsqueeze(0));
  patch_attrs(r, kernel, dilation, padding, stride);
  at::Tensor y = r.run1();
  return write_out(batched ? y : y.squeeze(0), out);
}

at::Tensor& k_col2im_out(const at::Tensor& self, c10::SymIntArrayRef output_size, at::IntArrayRef kernel,
                         at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride, at::Tensor& out) {
  TORCH_CHECK(self.dim() == 2 || self.dim() == 3, "col2im: expected 2D or 3D input, got ", self.sizes());
  TORCH_CHECK(kernel.size() == 2 && self.size(self.dim() - 2) % (kernel[0] * kernel[1]) == 0,
              "col2im: expected size of input's dimension 1 to be divisible by the product of kernel_size, but got ",
              self.size(self.dim() - 2));
  const bool batched = self.dim() == 3;
  OpRunner r("col2im", "aten::col2im");
  r.input(batched ? self : self.unsqueeze(0));
  patch_attrs(r, kernel, dilation, padding, stride);
  r.attrs().set_ints("output_size", to_dims(output_size));
  at::Tensor y = r.run1();
  return write_out(batched ? y : y.squeeze(0), out);
}

at::Tensor k_im2col(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef dilation, at::IntArrayRef padding,
                    at::IntArrayRef stride) {
  at::Tensor out = at::empty({0}, self.options());
  return k_im2col_out(self, kernel, dilation, padding, stride, out);
}
at::Tensor k_col2im(const at::Tensor& self, c10::SymIntArrayRef output_size, at::IntArrayRef kernel,
                    at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride) {
  at::Tensor out = at::empty({0}, self.options());
  return k_col2im_out(self, output_size, kernel, dilation, padding, stride, out);
}

// ---- renorm, mode, frexp, pdist ----------------------------------------------------------------

at::Tensor& k_renorm_out(const at::Tensor& self, const at::Scalar& p, int64_t dim, const at::Scalar& maxnorm,
                         at::Tensor& out) {
  TORCH_CHECK(p.toDouble() > 0, "renorm: non-positive-norm not supported");
  TORCH_CHECK(maxnorm.toDouble() >= 0, "renorm: expected maxnorm to be >= 0 but got ", maxnorm.toDouble());
  TORCH_CHECK(self.dim() > 1, "renorm: input needs at least 2 dimensions, got ", self.dim(), " dimensions");
  const at::ScalarType compute = accumulate_type(self.scalar_type());
  OpRunner r("renorm", "aten::renorm");
  r.input(self, compute);
  r.attrs().set_int("dim", c10::maybe_wrap_dim(dim, self.dim())).set_float("p", p.toDouble()).set_float("maxnorm", maxnorm.toDouble());
  return write_out(r.run1(), out);
}

std::tuple<at::Tensor, at::Tensor> k_mode(const at::Tensor& self, int64_t dim, bool keepdim) {
  if (self.dim() == 0) return {self.clone(), at::zeros({}, self.options().dtype(at::kLong))};
  dim = c10::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(self.size(dim) > 0, "mode(): expected a non-empty dimension ", dim, " but the input has shape ", self.sizes());
  OpRunner r("mode", "aten::mode");
  r.input(self);
  r.attrs().set_int("dim", dim);
  auto out = r.run(2);
  if (keepdim) return {out[0].unsqueeze(dim), out[1].unsqueeze(dim)};
  return {out[0], out[1]};
}

std::tuple<at::Tensor&, at::Tensor&> k_frexp_out(const at::Tensor& self, at::Tensor& mantissa, at::Tensor& exponent) {
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()),
              "torch.frexp() only supports floating-point dtypes, got ", self.scalar_type());
  TORCH_CHECK(mantissa.scalar_type() == self.scalar_type(), "torch.frexp() expects mantissa to have dtype ",
              self.scalar_type(), " but got ", mantissa.scalar_type());
  TORCH_CHECK(exponent.scalar_type() == at::kInt, "torch.frexp() expects exponent to have int dtype but got ",
              exponent.scalar_type());
  OpRunner r("frexp", "aten::frexp");
  r.input(self);
  auto out = r.run(2);
  write_out(out[0], mantissa);
  write_out(out[1], exponent);
  return {mantissa, exponent};
}

at::Tensor k_pdist_forward(const at::Tensor& self, double p) {
  TORCH_CHECK(self.dim() == 2, "pdist only supports 2D tensors, got: ", self.dim(), "D");
  TORCH_CHECK(p >= 0, "pdist only supports non-negative p values");
  OpRunner r("pdist", "aten::_pdist_forward");
  r.input(self);
  r.attrs().set_float("p", p);
  return r.run1();
}

// ---- multi-margin losses ------------------------------------------------------------------------

void check_margin_target(const at::Tensor& self, const at::Tensor& target, const char* label) {
  TORCH_CHECK(self.dim() <= 2 && self.numel() > 0, label, ": expected a non-empty vector or matrix input, got ", self.sizes());
  const int64_t rows = self.dim() == 2 ? self.size(0) : 1;
  TORCH_CHECK(target.numel() == rows || target.sizes() == self.sizes(), label, ": inconsistent target size ",
              target.sizes(), " for input of size ", self.sizes());
}

at::Tensor& k_multi_margin_out(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                               const at::Scalar& margin, const std::optional<at::Tensor>& weight, int64_t reduction,
                               at::Tensor& out) {
  check_margin_target(self, target, "multi_margin_loss");
  TORCH_CHECK(p.toLong() == 1 || p.toLong() == 2, "multi_margin_loss: only p == 1 and p == 2 supported");
  OpRunner r("multi_margin_loss", "aten::multi_margin_loss");
  r.input(self.dim() == 0 ? self.reshape({1}) : self).input(target.reshape({-1}), at::kLong);  // 0-dim: one class
  if (given(weight)) r.input(*weight, self.scalar_type());
  r.attrs().set_int("p", p.toLong()).set_float("margin", margin.toDouble()).set_int("reduction", reduction).set_bool("has_weight", given(weight));
  at::Tensor loss = r.run1();
  // an unbatched input's unreduced loss takes the target's shape ([] or [1])
  if (reduction == at::Reduction::None && self.dim() <= 1) loss = loss.reshape(target.sizes());
  return write_out(loss, out);
}

at::Tensor& k_multi_margin_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                        const at::Scalar& p, const at::Scalar& margin,
                                        const std::optional<at::Tensor>& weight, int64_t reduction,
                                        at::Tensor& grad_input) {
  OpRunner r("multi_margin_loss_backward", "aten::multi_margin_loss_backward");
  r.input(grad, self.scalar_type()).input(self.dim() == 0 ? self.reshape({1}) : self).input(target.reshape({-1}), at::kLong);
  if (given(weight)) r.input(*weight, self.scalar_type());
  r.attrs().set_int("p", p.toLong()).set_float("margin", margin.toDouble()).set_int("reduction", reduction).set_bool("has_weight", given(weight));
  return write_out(r.run1().reshape(self.sizes()), grad_input);
}

at::Tensor k_multi_margin(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                          const at::Scalar& margin, const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor out = at::empty({0}, self.options());
  return k_multi_margin_out(self, target, p, margin, weight, reduction, out);
}
at::Tensor k_multi_margin_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                   const at::Scalar& p, const at::Scalar& margin,
                                   const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor out = at::empty({0}, self.options());
  return k_multi_margin_backward_out(grad, self, target, p, margin, weight, reduction, out);
}

std::tuple<at::Tensor&, at::Tensor&> k_multilabel_margin_out(const at::Tensor& self, const at::Tensor& target,
                                                             int64_t reduction, at::Tensor& output,
                                                             at::Tensor& is_target) {
  TORCH_CHECK(self.dim() <= 2 && target.sizes() == self.sizes(), "multilabel_margin_loss: inconsistent target size: ",
              target.sizes(), " for input of size: ", self.sizes());
  const at::Tensor x = self.dim() == 0 ? self.reshape({1}) : self;
  OpRunner r("multilabel_margin_loss", "aten::multilabel_margin_loss_forward");
  r.input(x).input(target.reshape(x.sizes()), at::kLong);
  r.attrs().set_int("reduction", reduction);
  auto out = r.run(2);
  write_out(self.dim() == 0 ? out[0].reshape({}) : out[0], output);
  write_out(out[1].reshape(self.sizes()), is_target);
  return {output, is_target};
}

at::Tensor& k_multilabel_margin_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                             int64_t reduction, const at::Tensor& is_target, at::Tensor& grad_input) {
  const at::Tensor x = self.dim() == 0 ? self.reshape({1}) : self;
  OpRunner r("multilabel_margin_loss_backward", "aten::multilabel_margin_loss_backward");
  r.input(grad, self.scalar_type()).input(x).input(target.reshape(x.sizes()), at::kLong).input(is_target.reshape(x.sizes()), self.scalar_type());
  r.attrs().set_int("reduction", reduction);
  return write_out(r.run1().reshape(self.sizes()), grad_input);
}

std::tuple<at::Tensor, at::Tensor> k_multilabel_margin(const at::Tensor& self, const at::Tensor& target,
                                                       int64_t reduction) {
  at::Tensor out = at::empty({0}, self.options()), is_target = at::empty({0}, self.options());
  k_multilabel_margin_out(self, target, reduction, out, is_target);
  return {out, is_target};
}
at::Tensor k_multilabel_margin_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                        int64_t reduction, const at::Tensor& is_target) {
  at::Tensor out = at::empty({0}, self.options());
  return k_multilabel_margin_backward_out(grad, self, target, reduction, is_target, out);
}

// ---- adaptive max pooling ------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> adaptive_max_pool(const at::Tensor& self, at::IntArrayRef output_size, size_t n,
                                                     const char* label) {
  TORCH_CHECK(output_size.size() == n, label, ": output_size must have ", n, " elements, got ", output_size.size());
  TORCH_CHECK(self.dim() == static_cast<int64_t>(n) + 1 || self.dim() == static_cast<int64_t>(n) + 2, label,
              ": expected ", n + 1, "D or ", n + 2, "D input, got ", self.sizes());
  for (int64_t i = 1; i < self.dim(); ++i) {
    TORCH_CHECK(self.size(i) > 0, label, ": expected input to have non-zero size for non-batch dimensions, but input has sizes ",
                self.sizes(), " with dimension ", i, " being empty");
  }
  OpRunner r("adaptive_max_pool", label);
  r.input(self);
  r.attrs().set_ints("output_size", Dims(output_size.begin(), output_size.end()));
  auto out = r.run(2);
  return {out[0], out[1]};
}

template <size_t N>
std::tuple<at::Tensor&, at::Tensor&> k_adaptive_max_pool_out(const at::Tensor& self, at::IntArrayRef output_size,
                                                             at::Tensor& out, at::Tensor& indices) {
  auto [v, i] = adaptive_max_pool(self, output_size, N, N == 2 ? "aten::adaptive_max_pool2d" : "aten::adaptive_max_pool3d");
  write_out(v, out);
  write_out(i, indices);
  return {out, indices};
}

template <size_t N>
at::Tensor& k_adaptive_max_pool_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& indices,
                                             at::Tensor& grad_input) {
  OpRunner r("max_pool_backward", N == 2 ? "aten::adaptive_max_pool2d_backward" : "aten::adaptive_max_pool3d_backward");
  r.input(grad).input(self).input(indices, at::kLong);
  r.attrs().set_int("spatial", static_cast<int64_t>(N));
  return write_out(r.run1(), grad_input);
}

// ---- nonzero_static, trace, channel_shuffle, repeat_interleave -----------------------------------

at::Tensor k_nonzero_static(const at::Tensor& self, c10::SymInt size, int64_t fill_value) {
  const int64_t n = size.guard_int(__FILE__, __LINE__);
  TORCH_CHECK(n >= 0, "nonzero_static: 'size' must be an non-negative integer, got ", n);
  OpRunner r("nonzero", "aten::nonzero_static");
  r.input(self);
  r.attrs().set_int("count", n).set_int("fill", fill_value);
  return r.run1();
}

at::Tensor k_trace(const at::Tensor& self) {
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  return self.diagonal().sum();
}

at::Tensor k_channel_shuffle(const at::Tensor& self, c10::SymInt groups_sym) {
  const int64_t groups = groups_sym.guard_int(__FILE__, __LINE__);
  TORCH_CHECK(self.dim() > 2, "channel_shuffle expects input to have at least 3 dimensions, but got input with sizes ",
              self.sizes());
  TORCH_CHECK(groups > 0, "Number of groups to divide channels in must be positive. Value of groups:", groups);
  const int64_t c = self.size(1);
  TORCH_CHECK(c % groups == 0, "Number of channels must be divisible by groups. Got ", c, " channels and ", groups,
              " groups.");
  Dims split{self.size(0), groups, c / groups};
  split.insert(split.end(), self.sizes().begin() + 2, self.sizes().end());
  return self.reshape(split).transpose(1, 2).reshape(self.sizes());
}

at::Tensor k_repeat_interleave(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
              "repeats has to be Long or Int tensor");
  const at::Tensor ends = at::cumsum(repeats, 0, at::kLong);
  int64_t total = 0;
  if (output_size.has_value()) {
    total = output_size->guard_int(__FILE__, __LINE__);
  } else if (repeats.numel() > 0) {
    TORCH_CHECK(repeats.min().item<int64_t>() >= 0, "repeats can not be negative");
    total = ends[-1].item<int64_t>();  // data-dependent size: one host sync
  }
  const at::Tensor positions = at::arange(total, ends.options());
  return at::searchsorted(ends, positions, /*out_int32=*/false, /*right=*/true).to(repeats.scalar_type());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("reflection_pad1d.out", k_pad_out<kReflect, kReflect1>);
  m.impl("reflection_pad2d.out", k_pad_out<kReflect, kReflect2>);
  m.impl("reflection_pad3d.out", k_pad_out<kReflect, kReflect3>);
  m.impl("reflection_pad2d", k_pad<kReflect, kReflect2>);
  m.impl("reflection_pad1d_backward.grad_input", k_pad_backward_out<kReflect, kReflect1>);
  m.impl("reflection_pad2d_backward.grad_input", k_pad_backward_out<kReflect, kReflect2>);
  m.impl("reflection_pad3d_backward.grad_input", k_pad_backward_out<kReflect, kReflect3>);
  m.impl("reflection_pad2d_backward", k_pad_backward<kReflect, kReflect2>);
  m.impl("replication_pad1d.out", k_pad_out<kReplicate, kReplicate1>);
  m.impl("replication_pad2d.out", k_pad_out<kReplicate, kReplicate2>);
  m.impl("replication_pad3d.out", k_pad_out<kReplicate, kReplicate3>);
  m.impl("replication_pad1d_backward.grad_input", k_pad_backward_out<kReplicate, kReplicate1>);
  m.impl("replication_pad2d_backward.grad_input", k_pad_backward_out<kReplicate, kReplicate2>);
  m.impl("replication_pad3d_backward.grad_input", k_pad_backward_out<kReplicate, kReplicate3>);
  m.impl("replication_pad2d_backward", k_pad_backward<kReplicate, kReplicate2>);
  m.impl("replication_pad3d_backward", k_pad_backward<kReplicate, kReplicate3>);
  m.impl("glu.out", k_glu_out);
  m.impl("glu_backward.grad_input", k_glu_backward_out);
  m.impl("glu_backward", k_glu_backward);
  m.impl("_prelu_kernel", k_prelu);
  m.impl("_prelu_kernel_backward", k_prelu_backward);
  m.impl("im2col.out", k_im2col_out);
  m.impl("col2im.out", k_col2im_out);
  m.impl("im2col", k_im2col);
  m.impl("col2im", k_col2im);
  m.impl("renorm.out", k_renorm_out);
  m.impl("mode", k_mode);
  m.impl("frexp.Tensor_out", k_frexp_out);
  m.impl("_pdist_forward", k_pdist_forward);
  m.impl("multi_margin_loss.out", k_multi_margin_out);
  m.impl("multi_margin_loss_backward.grad_input", k_multi_margin_backward_out);
  m.impl("multi_margin_loss", k_multi_margin);
  m.impl("multi_margin_loss_backward", k_multi_margin_backward);
  m.impl("multilabel_margin_loss_forward.output", k_multilabel_margin_out);
  m.impl("multilabel_margin_loss_backward.grad_input", k_multilabel_margin_backward_out);
  m.impl("multilabel_margin_loss_forward", k_multilabel_margin);
  m.impl("multilabel_margin_loss_backward", k_multilabel_margin_backward);
  m.impl("adaptive_max_pool2d.out", k_adaptive_max_pool_out<2>);
  m.impl("adaptive_max_pool3d.out", k_adaptive_max_pool_out<3>);
  m.impl("adaptive_max_pool2d_backward.grad_input", k_adaptive_max_pool_backward_out<2>);
  m.impl("adaptive_max_pool3d_backward.grad_input", k_adaptive_max_pool_backward_out<3>);
  m.impl("nonzero_static", k_nonzero_static);
  m.impl("trace", k_trace);
  m.impl("channel_shuffle", k_channel_shuffle);
  m.impl("repeat_interleave.Tensor", k_repeat_interleave);
}

}  // namespace
}  // namespace tpu::aten
