#include "cache/executable_cache.h"

#include <chrono>

namespace tpu::cache {

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

ExecutableCache::ExecutableCache(size_t capacity)
    : capacity_(capacity), disk_(DiskCache::from_environment()) {}

std::shared_ptr<pjrt::LoadedExecutable> ExecutableCache::from_disk(const Fingerprint& fp,
                                                                   const Deserializer& load) {
  const auto start = std::chrono::steady_clock::now();
  std::optional<std::string> bytes = disk_.load(fp);
  if (!bytes) return nullptr;
  std::shared_ptr<pjrt::LoadedExecutable> exe;
  try {
    exe = load(*bytes);
  } catch (const std::exception&) {
    // Intact file the plugin refuses (e.g. written by another build): recompile and replace.
    disk_.reject(fp);
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.disk_loads;
  stats_.disk_load_seconds += seconds_since(start);
  return exe;
}

void ExecutableCache::insert(const Fingerprint& fp, std::shared_ptr<pjrt::LoadedExecutable> exe) {
  if (index_.count(fp)) return;  // filled concurrently
  lru_.emplace_front(fp, std::move(exe));
  index_[fp] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

std::shared_ptr<pjrt::LoadedExecutable> ExecutableCache::get_or_compile(const std::string& program,
                                                                        const Compiler& compile,
                                                                        const Deserializer& load) {
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
  std::shared_ptr<pjrt::LoadedExecutable> exe = from_disk(fp, load);
  if (exe == nullptr) {
    const auto start = std::chrono::steady_clock::now();
    exe = compile();
    const double seconds = seconds_since(start);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.compiles;
      stats_.compile_seconds += seconds;
    }
    if (disk_.enabled()) {
      try {
        disk_.store(fp, exe->serialize());
      } catch (const std::exception&) {
        // A plugin that cannot serialize simply has no disk tier.
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  insert(fp, exe);
  return index_.at(fp)->second;
}

CacheStats ExecutableCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats s = stats_;
  s.entries = static_cast<int64_t>(lru_.size());
  s.disk = disk_.stats();
  return s;
}

void ExecutableCache::clear(bool disk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    lru_.clear();
    index_.clear();
  }
  if (disk) disk_.clear();
}

}  // namespace tpu::cache
