#include "device/generator.h"

#include <ATen/Functions.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "device/current_device.h"
#include "runtime/runtime.h"

namespace tpu::device {

TpuGenerator::TpuGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void TpuGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}
void TpuGenerator::set_offset(uint64_t offset) { offset_ = offset; }
uint64_t TpuGenerator::get_offset() const { return offset_; }
uint64_t TpuGenerator::current_seed() const { return seed_; }

uint64_t TpuGenerator::seed() {
  const uint64_t s = c10::detail::getNonDeterministicRandom();
  set_current_seed(s);
  return s;
}

void TpuGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.device().is_cpu() && new_state.dtype() == at::kByte &&
                  new_state.numel() == 16 && new_state.is_contiguous(),
              "tpu generator state must be a contiguous uint8 CPU tensor of 16 bytes (seed, offset), "
              "as returned by torch.tpu.get_rng_state()");
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, bytes, 8);
  std::memcpy(&offset_, bytes + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> TpuGenerator::get_state() const {
  at::Tensor state = at::empty({16}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
  auto* bytes = state.data_ptr<uint8_t>();
  std::memcpy(bytes, &seed_, 8);
  std::memcpy(bytes + 8, &offset_, 8);
  return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> TpuGenerator::reserve(uint64_t increment) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t offset = offset_;
  offset_ += increment;
  return {seed_, offset};
}

TpuGenerator* TpuGenerator::clone_impl() const {
  auto* g = new TpuGenerator(device().index(), seed_);
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex mu;
  static std::deque<at::Generator> generators;  // stable addresses
  const int n = runtime::Runtime::get().device_count();
  if (device < 0) device = current_device();
  runtime::check_device_index(device);
  std::lock_guard<std::mutex> lock(mu);
  while (static_cast<int>(generators.size()) < n) {
    auto g = at::make_generator<TpuGenerator>(static_cast<c10::DeviceIndex>(generators.size()));
    g.set_current_seed(c10::default_rng_seed_val);
    generators.push_back(std::move(g));
  }
  return generators[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  return at::make_generator<TpuGenerator>(device);
}

TpuGenerator* generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device) {
  const at::Generator& g = (gen.has_value() && gen->defined()) ? *gen : default_generator(device);
  TORCH_CHECK(g.device().type() == c10::DeviceType::PrivateUse1,
              "expected a tpu generator, got a generator on ", g.device(),
              ". Fix: create it with torch.Generator(device='tpu')");
  return static_cast<TpuGenerator*>(g.unsafeGetGeneratorImpl());
}

}  // namespace tpu::device
