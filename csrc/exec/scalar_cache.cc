#include "exec/scalar_cache.h"

#include "runtime/transfers.h"

namespace tpu::exec {

std::shared_ptr<pjrt::Buffer> ScalarCache::get(const pjrt::Client& client, int device,
                                               const ScalarValue& v) {
  const std::string bytes = v.bytes();
  auto transfer = [&] { return runtime::upload(client, bytes.data(), v.dtype, {}, device); };
  if (!v.cacheable) return transfer();
  std::string key;
  key.push_back(static_cast<char>(device));
  key.push_back(static_cast<char>(v.dtype));
  key += bytes;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.find(key);
  if (it != buffers_.end()) return it->second;
  if (buffers_.size() >= kCapacity) buffers_.clear();
  auto buffer = transfer();
  buffers_.emplace(std::move(key), buffer);
  return buffer;
}

void ScalarCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.clear();
}

}  // namespace tpu::exec
