// The disk tier of the compilation cache: serialized executables under one directory
// (TORCH_TPU_CACHE_DIR, default ~/.cache/torch_tpu; "disabled" turns the tier off).
//
// The directory must be one only this user can write (cache/trusted_dir.h: created 0700; another
// owner or a directory others can write turns the tier off with a warning, unless
// TORCH_TPU_CACHE_SHARED=1). Each entry is one file named by the fingerprint of its key. It starts
// with a header - magic, format version, the key fingerprint, the sizes of the machine record and
// the payload, and an HMAC-SHA256 of all that under the directory's own key - so a truncated,
// corrupted, foreign, planted or altered file is detected and never handed to the plugin. The machine record (cache/host_cpu.h) names the CPU features of the machine that
// compiled the entry: an entry needing a feature this machine lacks is a miss (and recompiled),
// never loaded - its code could stop the process with SIGILL. Files are
// written to a private temporary name and renamed into place, so processes sharing the
// directory see either no entry or a whole one. The directory is bounded in bytes: after a
// write, the least recently used entries (by modification time; a load touches its file) are
// deleted until it fits.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "cache/fingerprint.h"
#include "cache/host_cpu.h"

namespace tpu::cache {

struct DiskStats {
  int64_t loads = 0;     // entries read back and accepted
  int64_t writes = 0;    // entries written
  int64_t rejected = 0;  // corrupt, truncated or foreign entries found and removed
  int64_t evicted = 0;   // entries deleted to respect the size bound
  int64_t host_mismatch = 0;  // intact entries compiled for a CPU with features this one lacks
};

class DiskCache {
 public:
  // An empty `dir` disables the tier, and so does a directory that cannot be trusted (see above;
  // the warning sink is told why). `machine`: the record of the CPU this process runs on,
  // written into new entries and checked against the record of every entry read.
  DiskCache(std::string dir, uint64_t max_bytes, std::string machine = host_cpu_record());

  // Where a refused directory is reported (the Python module turns it into a warning; stderr
  // until it is set).
  static void set_warning_sink(std::function<void(const std::string&)> sink);

  // Settings from TORCH_TPU_CACHE_DIR and TORCH_TPU_CACHE_MAX_BYTES (default 4 GiB).
  static DiskCache from_environment();

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  // Why the directory asked for was refused (empty when it was not).
  const std::string& refused() const { return refused_; }

  // The payload stored under `key`, or nullopt (missing; rejected and deleted; or compiled for
  // a CPU with features this one lacks).
  std::optional<std::string> load(const Fingerprint& key);
  // Stores `payload` under `key` (best effort: an unwritable directory only loses the entry).
  void store(const Fingerprint& key, const std::string& payload);
  // Deletes the entry for `key` (after the plugin refused its payload).
  void reject(const Fingerprint& key);
  // Deletes every entry.
  void clear();
  // Total bytes of the entries in the directory: scanned once, then kept up to date with this
  // process's writes and deletions (other processes' writes are seen at the next eviction).
  uint64_t bytes_on_disk() const;
  DiskStats stats() const;

  std::string path_of(const Fingerprint& key) const;

 private:
  void evict_to_fit();
  // Adds `delta` to the tracked total (scanning the directory first if it was never scanned).
  void account(int64_t delta) const;

  std::string dir_;
  std::string refused_;
  std::string key_;  // signs and checks entries (cache/trusted_dir.h)
  uint64_t max_bytes_;
  std::string machine_;
  mutable std::mutex mu_;
  DiskStats stats_;
  mutable int64_t tracked_bytes_ = -1;  // -1: not scanned yet
};

}  // namespace tpu::cache
