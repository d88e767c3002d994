#include "lowering/convolution.h"

#include <stdexcept>

#include "lowering/hlo_names.h"
#include "lowering/precision.h"
#include "lowering/registry.h"

namespace tpu::lowering {

using Padding = std::vector<std::pair<int64_t, int64_t>>;

namespace {

bool half(ElementType t) { return t == ElementType::kF16 || t == ElementType::kBF16; }

Value conv(Builder& b, Value x, Value w, const Dims& strides, const Padding& padding, const Dims& lhs_dilation,
           const Dims& rhs_dilation, int64_t feature_groups, int64_t batch_groups, const ConvParams& p) {
  const ElementType t = b.dtype(x);
  Value r = b.convolution(x, w, strides, padding, lhs_dilation, rhs_dilation, feature_groups, batch_groups,
                          half(t) ? ElementType::kF32 : t, contraction_precision(p.precision, p.tf32, t));
  return b.convert(r, t);
}

// Weight [A, B/g, k...] of a grouped conv -> [B, A/g, k...] with the spatial taps reversed:
// the kernel that runs the same connections backwards (transposed convolution).
Value flip_kernel(Builder& b, Value w, int64_t groups) {
  const Dims d = b.dims(w);
  const int64_t a = d[0], bg = d[1];
  Dims split{groups, a / groups, bg};
  Dims perm{0, 2, 1};
  Dims merged{groups * bg, a / groups};
  Dims spatial;
  for (size_t i = 2; i < d.size(); ++i) {
    split.push_back(d[i]);
    perm.push_back(static_cast<int64_t>(i + 1));
    merged.push_back(d[i]);
    spatial.push_back(static_cast<int64_t>(i));
  }
  Value r = b.reshape(b.transpose(b.reshape(w, split), perm), merged);
  return b.reverse(r, spatial);
}

// The transposed convolution of x by w (w laid out [C_x, C_out/g, k...]) producing spatial size
// `out_spatial`.
Value transposed(Builder& b, Value x, Value w, const ConvParams& p, const Dims& out_spatial) {
  const Dims xd = b.dims(x), wd = b.dims(w);
  const size_t n = xd.size() - 2;
  Padding pad(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t k = (wd[2 + i] - 1) * p.dilation[i] + 1;
    const int64_t low = k - 1 - p.padding[i];
    const int64_t dilated = (xd[2 + i] - 1) * p.stride[i] + 1;
    // output = dilated + low + high - k + 1
    pad[i] = {low, out_spatial[i] - dilated - low + k - 1};
  }
  return conv(b, x, flip_kernel(b, w, p.groups), Dims(n, 1), pad, p.stride, p.dilation, p.groups, 1, p);
}

Dims transposed_output(const Dims& xd, const Dims& wd, const ConvParams& p) {
  Dims out;
  for (size_t i = 0; i + 2 < xd.size(); ++i) {
    out.push_back((xd[2 + i] - 1) * p.stride[i] - 2 * p.padding[i] + p.dilation[i] * (wd[2 + i] - 1) +
                  p.output_padding[i] + 1);
  }
  return out;
}

// dL/dw of a plain convolution y = conv(x, w) from dL/dy: a convolution of x (batch and
// features swapped) with dy (as the kernel), grouped over the batch.
Value plain_weight_grad(Builder& b, Value dy, Value x, const ConvParams& p, const Dims& kernel_spatial) {
  const Dims xd = b.dims(x), gd = b.dims(dy);
  const size_t n = xd.size() - 2;
  Dims swap{1, 0};
  for (size_t i = 0; i < n; ++i) swap.push_back(static_cast<int64_t>(2 + i));
  Value lhs = b.transpose(x, swap);   // [C, N, S]
  Value rhs = b.transpose(dy, swap);  // [O, N, S']
  Padding pad(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t out_dilated = (gd[2 + i] - 1) * p.stride[i] + 1;
    const int64_t k_dilated = (kernel_spatial[i] - 1) * p.dilation[i] + 1;
    const int64_t lo = p.padding[i];
    pad[i] = {lo, (out_dilated - xd[2 + i]) + (k_dilated - lo - 1)};
  }
  Value r = conv(b, lhs, rhs, p.dilation, pad, Dims(n, 1), p.stride, 1, p.groups, p);  // [C/g, O, k]
  return b.transpose(r, swap);
}

}  // namespace

Value conv_forward(Builder& b, Value x, Value w, const ConvParams& p) {
  const size_t n = b.dims(x).size() - 2;
  if (p.transposed) return transposed(b, x, w, p, transposed_output(b.dims(x), b.dims(w), p));
  Padding pad(n);
  for (size_t i = 0; i < n; ++i) pad[i] = {p.padding[i], p.padding[i]};
  return conv(b, x, w, p.stride, pad, Dims(n, 1), p.dilation, p.groups, 1, p);
}

Value conv_input_grad(Builder& b, Value grad, Value w, const ConvParams& p, const Dims& input_spatial) {
  if (!p.transposed) return transposed(b, grad, w, p, input_spatial);
  // y = conv_transpose(x, w)  =>  dx = conv(dy, w) with the same hyper-parameters; rows that
  // only output_padding produced fall outside x and are cropped.
  ConvParams plain = p;
  plain.transposed = false;
  Value dx = conv_forward(b, grad, w, plain);
  Dims limit = b.dims(dx);
  for (size_t i = 0; i < input_spatial.size(); ++i) limit[2 + i] = input_spatial[i];
  return b.slice(dx, Dims(limit.size(), 0), limit, Dims(limit.size(), 1));
}

Value conv_weight_grad(Builder& b, Value grad, Value x, const ConvParams& p, const Dims& kernel_spatial) {
  if (!p.transposed) return plain_weight_grad(b, grad, x, p, kernel_spatial);
  // y = conv_transpose(x, w) is dx of a plain conv whose input is y: swap the roles.
  return plain_weight_grad(b, x, grad, p, kernel_spatial);
}

namespace {

ConvParams params_of(const Attrs& a) {
  ConvParams p;
  p.stride = a.get_ints("stride");
  p.padding = a.get_ints("padding");
  p.dilation = a.get_ints("dilation");
  p.output_padding = a.get_ints("output_padding");
  p.groups = a.get_int("groups");
  p.transposed = a.get_bool("transposed");
  p.tf32 = a.get_bool("tf32", false);
  p.precision = a.get_int("precision", -1);
  return p;
}

// The op run by ATen's CPU kernel inside the program (host_aten/conv_kernel.h): the operands
// as they are, the parameters as the custom call's scalar attributes.
std::vector<Value> host_conv(Builder& b, const std::vector<Value>& operands, const std::vector<TensorType>& types,
                             const Attrs& a, int64_t mask, bool bias) {
  std::string config = "call_target_name = \"torch_tpu_conv\", api_version = 4 : i32, backend_config = {";
  auto add = [&](const std::string& name, int64_t v) { config += name + " = " + std::to_string(v) + " : i64, "; };
  const char* lists[] = {"stride", "padding", "dilation", "output_padding"};
  const size_t n = a.get_ints("stride").size();
  for (const char* list : lists) {
    const Dims& v = a.get_ints(list);
    for (size_t i = 0; i < n; ++i) add(list + std::to_string(i), v[i]);
  }
  add("groups", a.get_int("groups"));
  add("transposed", a.get_bool("transposed") ? 1 : 0);
  add("bias", bias ? 1 : 0);
  add("mask", mask);
  config += "spatial = " + std::to_string(n) + " : i64}";
  return b.emit_multi("stablehlo.custom_call", operands, types, config);
}

Dims conv_output(const Dims& xd, const Dims& wd, const ConvParams& p) {
  if (p.transposed) {
    Dims out{xd[0], wd[1] * p.groups};
    for (int64_t s : transposed_output(xd, wd, p)) out.push_back(s);
    return out;
  }
  Padding pad;
  for (int64_t v : p.padding) pad.emplace_back(v, v);
  return Builder::convolution_dims(xd, wd, p.stride, pad, Dims(pad.size(), 1), p.dilation, 1);
}

Value add_bias(Builder& b, Value y, Value bias) {
  return b.add(y, b.broadcast_in_dim(bias, b.dims(y), {1}));
}

// convolution: inputs [x, w, (bias)]. Half-precision inputs compute in f32 and round once,
// after the bias, as PyTorch's CPU and CUDA kernels do.
std::vector<Value> lower_convolution(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const ElementType t = b.dtype(in[0]);
  if (ctx.attrs.get_bool("host_kernel", false)) {
    const Dims y = conv_output(b.dims(in[0]), b.dims(in[1]), params_of(ctx.attrs));
    return host_conv(b, in, {TensorType{t, y}}, ctx.attrs, 0, in.size() > 2);
  }
  auto wide = [&](Value v) { return half(t) ? b.convert(v, ElementType::kF32) : v; };
  Value y = conv_forward(b, wide(in[0]), wide(in[1]), params_of(ctx.attrs));
  if (in.size() > 2) y = add_bias(b, y, wide(in[2]));
  return {b.convert(y, t)};
}

// convolution_backward: inputs [grad, x, w]; attrs output_mask (3 bits) -> requested grads
std::vector<Value> lower_convolution_backward(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const ConvParams p = params_of(ctx.attrs);
  const Dims& mask = ctx.attrs.get_ints("output_mask");
  const Dims xd = b.dims(in[1]), wd = b.dims(in[2]);
  if (ctx.attrs.get_bool("host_kernel", false)) {
    const ElementType t = b.dtype(in[0]);
    std::vector<TensorType> types;
    if (mask[0]) types.push_back(TensorType{t, xd});
    if (mask[1]) types.push_back(TensorType{t, wd});
    if (mask[2]) types.push_back(TensorType{t, {b.dims(in[0])[1]}});
    return host_conv(b, in, types, ctx.attrs, mask[0] + 2 * mask[1] + 4 * mask[2], false);
  }
  std::vector<Value> out;
  if (mask[0]) out.push_back(conv_input_grad(b, in[0], in[2], p, Dims(xd.begin() + 2, xd.end())));
  if (mask[1]) out.push_back(conv_weight_grad(b, in[0], in[1], p, Dims(wd.begin() + 2, wd.end())));
  if (mask[2]) {
    Dims dims{0};
    for (size_t i = 2; i < b.dims(in[0]).size(); ++i) dims.push_back(static_cast<int64_t>(i));
    const ElementType t = b.dtype(in[0]);
    Value g = half(t) ? b.convert(in[0], ElementType::kF32) : in[0];
    out.push_back(b.convert(b.reduce(g, b.constant(b.dtype(g), 0), dims, hlo::ReduceKind::kSum), t));
  }
  return out;
}

const LoweringEntry kConvolution[] = {
    {"convolution", lower_convolution},
    {"convolution_backward", lower_convolution_backward},
};

TPU_REGISTER_LOWERINGS(kConvolution);

}  // namespace
}  // namespace tpu::lowering
