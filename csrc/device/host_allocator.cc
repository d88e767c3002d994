#include "device/host_allocator.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <c10/util/Exception.h>

namespace tpu::device {

namespace {
constexpr size_t kAlignment = 4096;

std::mutex g_mu;
std::map<uintptr_t, size_t> g_blocks;  // base -> size
at::HostStats g_stats;

void free_pinned(void* ptr) {
  if (ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_blocks.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != g_blocks.end()) {
      g_stats.allocated_bytes.decrease(it->second);
      g_blocks.erase(it);
    }
  }
  std::free(ptr);
}
}  // namespace

at::DataPtr PinnedHostAllocator::allocate(size_t nbytes) {
  void* ptr = nullptr;
  if (nbytes > 0) {
    const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    TORCH_CHECK(::posix_memalign(&ptr, kAlignment, rounded) == 0 && ptr != nullptr,
                "out of host memory allocating ", nbytes, " bytes of pinned memory");
    std::lock_guard<std::mutex> lock(g_mu);
    g_blocks[reinterpret_cast<uintptr_t>(ptr)] = nbytes;
    g_stats.allocated_bytes.increase(nbytes);
  }
  return {ptr, ptr, &free_pinned, at::Device(at::kCPU)};
}

at::DeleterFnPtr PinnedHostAllocator::raw_deleter() const { return &free_pinned; }

void PinnedHostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

at::HostStats PinnedHostAllocator::get_stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_stats;
}

bool PinnedHostAllocator::is_pinned(const void* ptr) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_blocks.upper_bound(p);
  if (it == g_blocks.begin()) return false;
  --it;
  return p >= it->first && p < it->first + std::max<size_t>(it->second, 1);
}

PinnedHostAllocator& pinned_allocator() {
  static PinnedHostAllocator instance;
  return instance;
}

namespace {
const bool g_registered = [] {
  at::setHostAllocator(at::kPrivateUse1, &pinned_allocator());
  return true;
}();
}  // namespace

}  // namespace tpu::device
