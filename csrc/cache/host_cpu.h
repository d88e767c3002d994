// The instruction-set record of the machine that compiles or loads an executable.
//
// The XLA CPU plugin compiles for the host it runs on (every instruction-set extension the CPU
// has, e.g. AVX-512), so a disk cache entry is only safe to run on a CPU that has every
// extension the compiling CPU had; anything else risks SIGILL. The disk tier records this in
// each entry's header (cache/disk_cache.h) and treats an entry the host cannot run as a miss.
#pragma once

#include <string>

namespace tpu::cache {

// This machine's record: "arch:<uname machine>" plus the CPU feature flags the kernel reports
// (/proc/cpuinfo "flags", or "Features" on Arm), sorted and space separated. Computed once.
//
// Test hook: TORCH_TPU_CACHE_HOST_FEATURES (space-separated flags) replaces the detected flags,
// to simulate entries written or read by a CPU with other extensions. Never set it to flags the
// CPU lacks outside tests: entries recorded that way may be loaded on a CPU that cannot run them.
const std::string& host_cpu_record();

// `flags` (whitespace separated, any order) as a record: sorted, unique, space separated.
std::string canonical_record(const std::string& flags);

// The entries of `recorded` that `host` lacks (empty: the host can run what was compiled).
std::string missing_features(const std::string& recorded, const std::string& host);

}  // namespace tpu::cache
