// The tpu random generator: a (seed, offset) pair, like CUDA's Philox generator. Each random
// op reserves a range of the counter space and passes (seed, offset) to its program, so a
// seed reproduces the same numbers and changing it does not recompile anything.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <utility>

namespace tpu::device {

class TpuGenerator final : public c10::GeneratorImpl {
 public:
  explicit TpuGenerator(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  // State: 16 bytes (uint8 CPU tensor) = seed and offset, little-endian uint64 each.
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // Returns (seed, offset) for one random op and advances the offset by `increment`.
  std::pair<uint64_t, uint64_t> reserve(uint64_t increment);

 private:
  TpuGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);
// The generator a random op should use: `gen` if given, else the device's default.
TpuGenerator* generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device);

}  // namespace tpu::device
