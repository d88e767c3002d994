// The compilation cache shared by every execution path: program text (+ compile options and
// plugin identity) -> loaded executable. The memory tier is a bounded LRU.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cache/fingerprint.h"
#include "pjrt/executable.h"

namespace tpu::cache {

struct CacheStats {
  int64_t hits = 0;       // lookups answered from memory
  int64_t misses = 0;     // lookups that had to compile
  int64_t compiles = 0;
  double compile_seconds = 0;
  int64_t entries = 0;
};

class ExecutableCache {
 public:
  explicit ExecutableCache(size_t capacity = 4096) : capacity_(capacity) {}

  using Compiler = std::function<std::unique_ptr<pjrt::LoadedExecutable>()>;
  // The executable for `program` (a full description: text, options, plugin), compiling it
  // with `compile` on a miss.
  std::shared_ptr<pjrt::LoadedExecutable> get_or_compile(const std::string& program,
                                                         const Compiler& compile);
  CacheStats stats() const;
  void clear();

 private:
  using Entry = std::pair<Fingerprint, std::shared_ptr<pjrt::LoadedExecutable>>;
  mutable std::mutex mu_;
  size_t capacity_;
  std::list<Entry> lru_;  // front = most recent
  std::unordered_map<Fingerprint, std::list<Entry>::iterator, FingerprintHash> index_;
  CacheStats stats_;
};

}  // namespace tpu::cache
