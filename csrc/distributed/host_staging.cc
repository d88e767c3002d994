#include "distributed/host_staging.h"

#include <ATen/ATen.h>

#include <cstdlib>

#include "aten/host_transfer.h"

namespace tpu::distributed {

namespace {
constexpr size_t kAlignment = 4096;  // zero-copy device buffers want aligned host memory
}  // namespace

HostStaging& HostStaging::get() {
  static HostStaging* pool = new HostStaging();  // never destroyed: blocks may outlive exit paths
  return *pool;
}

void HostStaging::release(void* block, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_bytes_ + bytes > kMaxIdleBytes) {
    std::free(block);
    return;
  }
  idle_.emplace(bytes, block);
  idle_bytes_ += bytes;
}

std::vector<at::Tensor> HostStaging::returned_locked() {
  // Lent tensors whose device buffers are gone: their blocks return as they die.
  std::vector<at::Tensor> done;
  for (auto it = lent_.begin(); it != lent_.end();) {
    if (it->first->is_ready()) {
      done.push_back(std::move(it->second));
      it = lent_.erase(it);
    } else {
      ++it;
    }
  }
  return done;
}

at::Tensor HostStaging::empty(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const size_t bytes = std::max<size_t>(1, static_cast<size_t>(numel) * c10::elementSize(dtype));
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::vector<at::Tensor> returned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    returned = returned_locked();
  }
  returned.clear();  // outside the lock: their deleters take it
  void* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.find(rounded);
    if (it != idle_.end()) {
      block = it->second;
      idle_.erase(it);
      idle_bytes_ -= rounded;
    }
  }
  if (block == nullptr) {
    block = std::aligned_alloc(kAlignment, rounded);
    TORCH_CHECK(block != nullptr, "tpu_dist: out of host memory for a ", rounded, "-byte staging buffer");
  }
  return at::from_blob(block, sizes, [this, rounded](void* p) { release(p, rounded); },
                       at::TensorOptions().dtype(dtype).device(at::kCPU));
}

at::Tensor HostStaging::copy_of(const at::Tensor& t) {
  at::Tensor host = empty(t.sizes(), t.scalar_type());
  host.copy_(t);
  return host;
}

void HostStaging::write(const at::Tensor& dst, at::Tensor host) {
  std::shared_ptr<pjrt::Event> done = aten::write_adopting_host_memory(host, dst);
  if (done == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  lent_.emplace_back(std::move(done), std::move(host));
}

}  // namespace tpu::distributed
