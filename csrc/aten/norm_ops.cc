// Batch, layer and group normalization (forward and backward).
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

// The dtype ATen gives batch-norm statistics: the running stats' or weight's, else the input's.
at::ScalarType stats_dtype(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& running_mean) {
  if (given(running_mean)) return running_mean->scalar_type();
  if (given(weight)) return weight->scalar_type();
  return input.scalar_type();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                                          const std::optional<at::Tensor>& bias,
                                                          const std::optional<at::Tensor>& running_mean,
                                                          const std::optional<at::Tensor>& running_var, bool training,
                                                          double momentum, double eps) {
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected an input with at least 2 dimensions, got ", input.dim());
  const bool running = given(running_mean) && given(running_var);
  TORCH_CHECK(training || running, "running_mean and running_var must be defined in evaluation mode");
  const at::ScalarType compute = accumulate_type(input.scalar_type());
  OpRunner r("batch_norm", "aten::native_batch_norm");
  r.input(input, compute);
  if (given(weight)) r.input(*weight, compute);
  if (given(bias)) r.input(*bias, compute);
  if (running) r.input(*running_mean, compute).input(*running_var, compute);
  r.attrs().set_bool("has_weight", given(weight)).set_bool("has_bias", given(bias)).set_bool("has_running", running);
  r.attrs().set_bool("training", training).set_float("momentum", momentum).set_float("eps", eps);
  r.attrs().set_dtype("out_dtype", element_type(input.scalar_type()));
  r.attrs().set_dtype("stats_dtype", element_type(stats_dtype(input, weight, running_mean)));
  std::vector<std::optional<at::Tensor>> targets(3);
  if (training && running) {
    targets.push_back(*running_mean);
    targets.push_back(*running_var);
  }
  auto out = r.run_mixed(targets);
  return {out[0], out[1], out[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  return batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_batch_norm_legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum, double eps) {
  return batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_batch_norm_legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    bool training, double momentum, double eps) {
  return batch_norm(input, weight, bias, std::nullopt, std::nullopt, training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_batch_norm_legit_no_training(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const at::Tensor& running_mean, const at::Tensor& running_var, double momentum, double eps) {
  return batch_norm(input, weight, bias, running_mean, running_var, false, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> k_batch_norm_with_update(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, double momentum, double eps) {
  auto [out, mean, invstd] = batch_norm(input, weight, bias, running_mean, running_var, true, momentum, eps);
  return {out, mean, invstd, at::empty({0}, input.options().dtype(at::kByte))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train,
    double eps, std::array<bool, 3> mask) {
  const at::ScalarType compute = accumulate_type(input.scalar_type());
  OpRunner r("batch_norm_backward", "aten::native_batch_norm_backward");
  r.input(grad_out, compute).input(input, compute);
  if (given(weight)) r.input(*weight, compute);
  if (train) {
    r.input(*save_mean, compute).input(*save_invstd, compute);
  } else {
    r.input(*running_mean, compute).input(*running_var, compute);
  }
  r.attrs().set_bool("has_weight", given(weight)).set_bool("training", train).set_float("eps", eps);
  r.attrs().set_ints("output_mask", {mask[0], mask[1], mask[2]});
  r.attrs().set_dtype("out_dtype", element_type(input.scalar_type()));
  r.attrs().set_dtype("stats_dtype", element_type(given(weight) ? weight->scalar_type() : input.scalar_type()));
  auto outs = r.run(mask[0] + mask[1] + mask[2]);
  std::array<at::Tensor, 3> grads;
  size_t next = 0;
  for (size_t i = 0; i < 3; ++i) if (mask[i]) grads[i] = outs[next++];
  return {grads[0], grads[1], grads[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train,
    double eps, std::array<bool, 3> mask) {
  return batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                             mask);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_var, bool update, double eps,
    std::array<bool, 3> mask, const at::Tensor& reserve) {
  return batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps,
                             mask);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_layer_norm(const at::Tensor& input,
                                                                   at::IntArrayRef normalized_shape,
                                                                   const std::optional<at::Tensor>& weight,
                                                                   const std::optional<at::Tensor>& bias, double eps) {
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized_shape.size());
  TORCH_CHECK(axis >= 0 && input.sizes().slice(axis).equals(normalized_shape),
              "Given normalized_shape=", normalized_shape, ", expected input with shape [*, ",
              normalized_shape, "], but got input of size", input.sizes());
  const at::ScalarType compute = accumulate_type(input.scalar_type());
  OpRunner r("layer_norm", "aten::native_layer_norm");
  r.input(input, compute);
  if (given(weight)) r.input(*weight, compute);
  if (given(bias)) r.input(*bias, compute);
  r.attrs().set_int("axis", axis).set_float("eps", eps).set_bool("has_weight", given(weight)).set_bool("has_bias", given(bias));
  r.attrs().set_dtype("out_dtype", element_type(input.scalar_type()));
  auto out = r.run(3);
  return {out[0], out[1], out[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, at::IntArrayRef normalized_shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    std::array<bool, 3> mask) {
  const at::ScalarType compute = accumulate_type(input.scalar_type());
  OpRunner r("layer_norm_backward", "aten::native_layer_norm_backward");
  r.input(grad_out, compute).input(input, compute).input(mean, compute).input(rstd, compute);
  if (given(weight)) r.input(*weight, compute);
  r.attrs().set_int("axis", input.dim() - static_cast<int64_t>(normalized_shape.size())).set_bool("has_weight", given(weight));
  r.attrs().set_ints("output_mask", {mask[0], mask[1] && given(weight), mask[2] && given(bias)});
  r.attrs().set_dtype("out_dtype", element_type(input.scalar_type()));
  r.attrs().set_dtype("param_dtype", element_type(given(weight) ? weight->scalar_type() : input.scalar_type()));
  const std::array<bool, 3> m{mask[0], mask[1] && given(weight), mask[2] && given(bias)};
  auto outs = r.run(m[0] + m[1] + m[2]);
  std::array<at::Tensor, 3> grads;
  size_t next = 0;
  for (size_t i = 0; i < 3; ++i) if (m[i]) grads[i] = outs[next++];
  return {grads[0], grads[1], grads[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_group_norm(const at::Tensor& input,
                                                                   const std::optional<at::Tensor>& weight,
                                                                   const std::optional<at::Tensor>& bias, int64_t n,
                                                                   int64_t c, int64_t hw, int64_t group, double eps) {
  TORCH_CHECK(group > 0 && c % group == 0, "Expected number of channels in input to be divisible by num_groups, but "
              "got input of shape ", input.sizes(), " and num_groups=", group);
  const at::ScalarType compute = accumulate_type(input.scalar_type());
  OpRunner r("group_norm", "aten::native_group_norm");
  r.input(input, compute);
  if (given(weight)) r.input(*weight, compute);
  if (given(bias)) r.input(*bias, compute);
  r.attrs().set_int("N", n).set_int("C", c).set_int("HxW", hw).set_int("group", group).set_float("eps", eps);
  r.attrs().set_bool("has_weight", given(weight)).set_bool("has_bias", given(bias));
  r.attrs().set_dtype("out_dtype", element_type(input.scalar_type()));
  auto out = r.run(3);
  return {out[0], out[1], out[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_native_group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, int64_t n, int64_t c, int64_t hw, int64_t group,
    std::array<bool, 3> mask) {
  const at::ScalarType compute = accumulate_type(input.scalar_type());
  OpRunner r("group_norm_backward", "aten::native_group_norm_backward");
  r.input(grad_out, compute).input(input, compute).input(mean, compute).input(rstd, compute);
  if (given(weight)) r.input(*weight, compute);
  r.attrs().set_int("N", n).set_int("C", c).set_int("HxW", hw).set_int("group", group);
  r.attrs().set_bool("has_weight", given(weight)).set_ints("output_mask", {mask[0], mask[1], mask[2]});
  r.attrs().set_dtype("out_dtype", element_type(input.scalar_type()));
  auto outs = r.run(mask[0] + mask[1] + mask[2]);
  std::array<at::Tensor, 3> grads;
  size_t next = 0;
  for (size_t i = 0; i < 3; ++i) if (mask[i]) grads[i] = outs[next++];
  return {grads[0], grads[1], grads[2]};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_batch_norm", k_native_batch_norm);
  m.impl("_native_batch_norm_legit", k_native_batch_norm_legit);
  m.impl("_native_batch_norm_legit.no_stats", k_native_batch_norm_legit_no_stats);
  m.impl("_native_batch_norm_legit_no_training", k_native_batch_norm_legit_no_training);
  m.impl("_batch_norm_with_update", k_batch_norm_with_update);
  m.impl("native_batch_norm_backward", k_native_batch_norm_backward);
  m.impl("batch_norm_backward", k_batch_norm_backward);
  m.impl("native_layer_norm", k_native_layer_norm);
  m.impl("native_layer_norm_backward", k_native_layer_norm_backward);
  m.impl("native_group_norm", k_native_group_norm);
  m.impl("native_group_norm_backward", k_native_group_norm_backward);
}

}  // namespace
}  // namespace tpu::aten
