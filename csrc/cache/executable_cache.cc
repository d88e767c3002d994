#include "cache/executable_cache.h"

#include <chrono>

namespace tpu::cache {

std::shared_ptr<pjrt::LoadedExecutable> ExecutableCache::get_or_compile(const std::string& program,
                                                                        const Compiler& compile) {
  const Fingerprint fp = fingerprint(program);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(fp);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
    ++stats_.misses;
  }
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<pjrt::LoadedExecutable> exe = compile();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.compiles;
  stats_.compile_seconds += seconds;
  auto it = index_.find(fp);
  if (it != index_.end()) return it->second->second;  // compiled concurrently
  lru_.emplace_front(fp, exe);
  index_[fp] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return exe;
}

CacheStats ExecutableCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats s = stats_;
  s.entries = static_cast<int64_t>(lru_.size());
  return s;
}

void ExecutableCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  lru_.clear();
  index_.clear();
}

}  // namespace tpu::cache
