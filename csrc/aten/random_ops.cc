// In-place random fills (uniform_, normal_, random_): rand, randn, randint and friends are
// PyTorch composites over these. Each draws from the device generator (see device/generator.h).
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
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "uniform_ is implemented for floating types only, got ",
              self.scalar_type());
  OpRunner r("uniform", "aten::uniform_");
  with_generator(r, self, gen).on_device(tpu_index(self));
  r.scalar(from, param_dtype(self)).scalar(to, param_dtype(self)).run_into(self);
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()), "normal_ is implemented for floating types only, got ",
              self.scalar_type());
  OpRunner r("normal", "aten::normal_");
  with_generator(r, self, gen).on_device(tpu_index(self));
  r.scalar(mean, param_dtype(self)).scalar(std, param_dtype(self)).run_into(self);
  return self;
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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", uniform_);
  m.impl("normal_", normal_);
  m.impl("random_.from", random_from);
  m.impl("random_.to", random_to);
  m.impl("random_", random_default);
}

}  // namespace
}  // namespace tpu::aten
