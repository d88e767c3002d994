// In-place random fills (uniform_, normal_, random_): rand, randn, randint and friends are
// PyTorch composites over these. Each draws from the device generator (see device/generator.h).
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/view_as_real.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "device/generator.h"

namespace tpu::aten {
namespace {

// Reserves counter space for one op (two 64-bit draws per element covers every lowering).
OpRunner& with_generator(OpRunner& r, const at::Tensor& self, const std::optional<at::Generator>& gen) {
  auto* g = device::generator_for(gen, static_cast<c10::DeviceIndex>(tpu_index(self)));
  auto [seed, offset] = g->reserve(2 * static_cast<uint64_t>(std::max<int64_t>(self.numel(), 1)));
  r.scalar_u64(seed, /*cacheable=*/true).scalar_u64(offset, /*cacheable=*/false);
  r.attrs().set_ints("shape", std::vector<int64_t>(self.sizes().begin(), self.sizes().end()));
  r.attrs().set_dtype("dtype", element_type(self.scalar_type()));
  return r;
}

at::ScalarType param_dtype(const at::Tensor& self) {
  return self.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from,
              " > to=", to);
  // Complex: real and imaginary parts drawn independently from [from, to), as PyTorch does.
  if (self.is_complex()) {
    at::view_as_real(self).uniform_(from, to, gen);
    return self;
  }
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "uniform_ is implemented for floating types only, got ",
              self.scalar_type());
  OpRunner r("uniform", "aten::uniform_");
  with_generator(r, self, gen).on_device(tpu_index(self));
  r.scalar(from, param_dtype(self)).scalar(to, param_dtype(self)).run_into(self);
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  // Complex: each part normal with half the variance, as PyTorch does.
  if (self.is_complex()) {
    at::view_as_real(self).normal_(mean, std / std::sqrt(2.0), gen);
    return self;
  }
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "normal_ is implemented for floating types only, got ",
              self.scalar_type());
  OpRunner r("normal", "aten::normal_");
  with_generator(r, self, gen).on_device(tpu_index(self));
  r.scalar(mean, param_dtype(self)).scalar(std, param_dtype(self)).run_into(self);
  return self;
}

// normal(mean, std) with tensor parameters: a standard draw scaled and shifted, broadcasting
// mean and std like PyTorch. A negative std raises (one host sync, as on CUDA).
at::Tensor normal_params(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  TORCH_CHECK(c10::isFloatingType(mean.scalar_type()) && c10::isFloatingType(std.scalar_type()),
              "normal expects floating-point mean and std, got ", mean.scalar_type(), " and ", std.scalar_type());
  TORCH_CHECK(std.numel() == 0 || std.min().ge(0).item<bool>(), "normal expects all elements of std >= 0.0");
  const at::Tensor& like = mean.is_privateuseone() ? mean : std;
  at::Tensor out = at::empty(at::infer_size(mean.sizes(), std.sizes()), like.options().dtype(at::result_type(mean, std)));
  normal_(out, 0.0, 1.0, gen);
  return out.mul_(std).add_(mean);
}
at::Tensor k_normal_tensor_tensor(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  return normal_params(mean, std, gen);
}
at::Tensor k_normal_tensor_float(const at::Tensor& mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  TORCH_CHECK(c10::isFloatingType(mean.scalar_type()), "normal expects a floating-point mean, got ", mean.scalar_type());
  at::Tensor out = at::empty_like(mean, at::MemoryFormat::Contiguous);
  normal_(out, 0.0, std, gen);
  return out.add_(mean);
}
at::Tensor k_normal_float_tensor(double mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  TORCH_CHECK(c10::isFloatingType(std.scalar_type()), "normal expects a floating-point std, got ", std.scalar_type());
  TORCH_CHECK(std.numel() == 0 || std.min().ge(0).item<bool>(), "normal expects all elements of std >= 0.0");
  at::Tensor out = at::empty_like(std, at::MemoryFormat::Contiguous);
  normal_(out, 0.0, 1.0, gen);
  return out.mul_(std).add_(mean);
}

// rrelu: in training, negative inputs are scaled by a slope drawn from U(lower, upper) and the
// slopes (1 for non-negative inputs) are stored in `noise` for the backward; in evaluation the
// slope is the mean (lower + upper) / 2.
at::Tensor rrelu_with_noise_impl(const at::Tensor& self, const at::Tensor& noise, const at::Scalar& lower,
                                 const at::Scalar& upper, bool training, std::optional<at::Generator> gen) {
  if (!training) return at::leaky_relu(self, (lower.toDouble() + upper.toDouble()) / 2);
  TORCH_CHECK(noise.sizes() == self.sizes(), "rrelu_with_noise: noise must have the input's shape ", self.sizes(),
              ", got ", noise.sizes());
  at::Tensor slopes = at::empty_like(self, at::MemoryFormat::Contiguous);
  uniform_(slopes, lower.toDouble(), upper.toDouble(), gen);
  at::Tensor scale = at::where(self <= 0, slopes, at::ones({}, self.options()));
  const_cast<at::Tensor&>(noise).copy_(scale);
  return self * scale;
}
at::Tensor k_rrelu_with_noise(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                              const at::Scalar& upper, bool training, std::optional<at::Generator> gen) {
  return rrelu_with_noise_impl(self, noise, lower, upper, training, gen);
}
at::Tensor& k_rrelu_with_noise_(at::Tensor& self, at::Tensor& noise, const at::Scalar& lower, const at::Scalar& upper,
                                bool training, std::optional<at::Generator> gen) {
  return self.copy_(rrelu_with_noise_impl(self, noise, lower, upper, training, gen));
}
at::Tensor& k_rrelu_with_noise_out(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                                   const at::Scalar& upper, bool training, std::optional<at::Generator> gen,
                                   at::Tensor& out) {
  at::Tensor r = rrelu_with_noise_impl(self, noise, lower, upper, training, gen);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

// Draws integers in [low, low + span).
at::Tensor& random_range(at::Tensor& self, int64_t low, uint64_t span, std::optional<at::Generator> gen) {
  OpRunner r("random_int", "aten::random_");
  with_generator(r, self, gen).on_device(tpu_index(self));
  r.scalar(low, at::kLong).scalar(static_cast<int64_t>(span), at::kLong).run_into(self);
  return self;
}

// The default upper bound of random_(): 2^mantissa for floats, the max value for integers.
uint64_t default_span(at::ScalarType t) {
  switch (t) {
    case at::kBool: return 2;
    case at::kByte: return 256;
    case at::kChar: return 128;
    case at::kShort: return 1u << 15;
    case at::kInt: return 1ull << 31;
    case at::kLong: return 1ull << 63;
    case at::kHalf: return (1ull << 11) + 1;
    case at::kBFloat16: return (1ull << 8) + 1;
    case at::kFloat: return (1ull << 24) + 1;
    case at::kDouble: return (1ull << 53) + 1;
    default: return 1ull << 31;
  }
}

at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                        std::optional<at::Generator> gen) {
  if (to.has_value()) {
    TORCH_CHECK(from < *to, "random_ expects 'from' to be less than 'to', but got from=", from,
                " >= to=", *to);
    return random_range(self, from, static_cast<uint64_t>(*to - from), gen);
  }
  return random_range(self, from, default_span(self.scalar_type()) - static_cast<uint64_t>(std::max<int64_t>(from, 0)), gen);
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return random_from(self, 0, to, gen);
}

at::Tensor& random_default(at::Tensor& self, std::optional<at::Generator> gen) {
  return random_range(self, 0, default_span(self.scalar_type()), gen);
}

at::Tensor& k_bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  OpRunner r("bernoulli", "aten::bernoulli_");
  with_generator(r, self, gen).on_device(tpu_index(self));
  r.scalar(p, at::kFloat).run_into(self);
  return self;
}

at::Tensor& k_bernoulli_tensor(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  OpRunner r("bernoulli", "aten::bernoulli_");
  with_generator(r, self, gen).on_device(tpu_index(self));
  r.input(p.device() == self.device() ? p : p.to(self.device()), at::kFloat).run_into(self);
  return self;
}

at::Tensor k_bernoulli(const at::Tensor& self, std::optional<at::Generator> gen) {
  at::Tensor out = at::empty_like(self);
  return k_bernoulli_tensor(out, self, gen);
}
at::Tensor& k_bernoulli_out(const at::Tensor& self, std::optional<at::Generator> gen, at::Tensor& out) {
  out.resize_(self.sizes());
  return k_bernoulli_tensor(out, self, gen);
}

std::tuple<at::Tensor, at::Tensor> k_native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (!train.value_or(true) || p == 0) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  if (p == 1) return {at::zeros_like(input), at::zeros_like(input, input.options().dtype(at::kBool))};
  OpRunner r("dropout", "aten::native_dropout");
  auto* g = device::generator_for(std::nullopt, static_cast<c10::DeviceIndex>(tpu_index(input)));
  auto [seed, offset] = g->reserve(2 * static_cast<uint64_t>(std::max<int64_t>(input.numel(), 1)));
  r.scalar_u64(seed, true).scalar_u64(offset, false).input(input).scalar(p, at::kFloat);
  auto out = r.run(2);
  return {out[0], out[1]};
}

at::Tensor k_native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  return grad * mask.to(grad.scalar_type()) * scale;
}

at::Tensor& transform(at::Tensor& self, const char* kind, double a, double b, std::optional<at::Generator> gen,
                      const char* label) {
  OpRunner r("random_transform", label);
  with_generator(r, self, gen).on_device(tpu_index(self));
  r.scalar(a, param_dtype(self)).scalar(b, param_dtype(self));
  r.attrs().set_string("kind", kind);
  r.run_into(self);
  return self;
}
at::Tensor& k_exponential_(at::Tensor& self, double lambd, std::optional<at::Generator> gen) {
  TORCH_CHECK(lambd > 0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
  return transform(self, "exponential", lambd, 0, gen, "aten::exponential_");
}
at::Tensor& k_geometric_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(0 < p && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
  return transform(self, "geometric", p, 0, gen, "aten::geometric_");
}
at::Tensor& k_log_normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
  return transform(self, "log_normal", mean, std, gen, "aten::log_normal_");
}
at::Tensor& k_cauchy_(at::Tensor& self, double median, double sigma, std::optional<at::Generator> gen) {
  TORCH_CHECK(sigma > 0.0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
  return transform(self, "cauchy", median, sigma, gen, "aten::cauchy_");
}

at::Tensor& k_randperm_out(int64_t n, std::optional<at::Generator> gen, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  out.resize_({n});
  if (n == 0) return out;
  OpRunner r("randperm", "aten::randperm");
  auto* g = device::generator_for(gen, static_cast<c10::DeviceIndex>(tpu_index(out)));
  auto [seed, offset] = g->reserve(2 * static_cast<uint64_t>(n));
  r.scalar_u64(seed, true).scalar_u64(offset, false);
  r.attrs().set_int("n", n).set_dtype("dtype", element_type(out.scalar_type()));
  r.run_into(out);
  return out;
}

at::Tensor k_multinomial(const at::Tensor& self, int64_t num_samples, bool replacement,
                         std::optional<at::Generator> gen) {
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(num_samples > 0, "cannot sample n_sample <= 0 samples");
  TORCH_CHECK(replacement || num_samples <= self.size(-1),
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  OpRunner r("multinomial", "aten::multinomial");
  auto* g = device::generator_for(gen, static_cast<c10::DeviceIndex>(tpu_index(self)));
  auto [seed, offset] = g->reserve(2 * static_cast<uint64_t>(std::max<int64_t>(self.numel() * num_samples, 1)));
  r.scalar_u64(seed, true).scalar_u64(offset, false).input(self, at::kFloat);
  r.attrs().set_int("num_samples", num_samples).set_bool("replacement", replacement);
  return r.run1();
}
at::Tensor& k_multinomial_out(const at::Tensor& self, int64_t num_samples, bool replacement,
                              std::optional<at::Generator> gen, at::Tensor& out) {
  at::Tensor r = k_multinomial(self, num_samples, replacement, gen);
  out.resize_(r.sizes());
  return out.copy_(r);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("bernoulli_.float", k_bernoulli_float);
  m.impl("bernoulli_.Tensor", k_bernoulli_tensor);
  m.impl("bernoulli", k_bernoulli);
  m.impl("bernoulli.out", k_bernoulli_out);
  m.impl("native_dropout", k_native_dropout);
  m.impl("native_dropout_backward", k_native_dropout_backward);
  m.impl("exponential_", k_exponential_);
  m.impl("geometric_", k_geometric_);
  m.impl("log_normal_", k_log_normal_);
  m.impl("cauchy_", k_cauchy_);
  m.impl("randperm.generator_out", k_randperm_out);
  m.impl("multinomial", k_multinomial);
  m.impl("multinomial.out", k_multinomial_out);
  m.impl("uniform_", uniform_);
  m.impl("normal_", normal_);
  m.impl("normal.Tensor_Tensor", k_normal_tensor_tensor);
  m.impl("rrelu_with_noise", k_rrelu_with_noise);
  m.impl("rrelu_with_noise_", k_rrelu_with_noise_);
  m.impl("rrelu_with_noise.out", k_rrelu_with_noise_out);
  m.impl("normal.Tensor_float", k_normal_tensor_float);
  m.impl("normal.float_Tensor", k_normal_float_tensor);
  m.impl("random_.from", random_from);
  m.impl("random_.to", random_to);
  m.impl("random_", random_default);
}

}  // namespace
}  // namespace tpu::aten
