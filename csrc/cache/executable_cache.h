// The compilation cache shared by every execution path: program description (StableHLO text,
// compile options, plugin identity and version, device kind) -> loaded executable.
//
// Two tiers: a bounded LRU of loaded executables in memory (2048; see exec/program_cache.cc for why
// the number of live executables is bounded), and serialized executables on disk
// (cache/disk_cache.h) that survive the process. A lookup tries memory, then disk, then
// compiles and fills both.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cache/disk_cache.h"
#include "cache/fingerprint.h"
#include "pjrt/executable.h"

namespace tpu::cache {

struct CacheStats {
  int64_t hits = 0;        // lookups answered from memory
  int64_t misses = 0;      // lookups not in memory (answered from disk or compiled)
  int64_t compiles = 0;
  double compile_seconds = 0;
  int64_t entries = 0;     // executables in memory
  int64_t disk_loads = 0;  // executables read back from disk instead of compiled
  double disk_load_seconds = 0;
  DiskStats disk;
};

class ExecutableCache {
 public:
  explicit ExecutableCache(size_t capacity = 2048);

  using Compiler = std::function<std::unique_ptr<pjrt::LoadedExecutable>()>;
  using Deserializer = std::function<std::unique_ptr<pjrt::LoadedExecutable>(const std::string&)>;

  // The executable for `program` (a full description), loading it from disk with `load` or
  // compiling it with `compile` on a miss.
  std::shared_ptr<pjrt::LoadedExecutable> get_or_compile(const std::string& program,
                                                         const Compiler& compile,
                                                         const Deserializer& load);
  CacheStats stats() const;
  // Drops the memory tier; with `disk`, deletes the disk entries too.
  void clear(bool disk);
  DiskCache& disk() { return disk_; }

 private:
  std::shared_ptr<pjrt::LoadedExecutable> from_disk(const Fingerprint& fp, const Deserializer& load);
  void insert(const Fingerprint& fp, std::shared_ptr<pjrt::LoadedExecutable> exe);

  using Entry = std::pair<Fingerprint, std::shared_ptr<pjrt::LoadedExecutable>>;
  mutable std::mutex mu_;
  size_t capacity_;
  std::list<Entry> lru_;  // front = most recent
  std::unordered_map<Fingerprint, std::list<Entry>::iterator, FingerprintHash> index_;
  CacheStats stats_;
  DiskCache disk_;
};

}  // namespace tpu::cache
