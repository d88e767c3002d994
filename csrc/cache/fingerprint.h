// 128-bit fingerprint of a byte string (two independent 64-bit FNV-1a style hashes), used to
// key compiled executables by their program text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tpu::cache {

struct Fingerprint {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const Fingerprint& o) const { return hi == o.hi && lo == o.lo; }
  std::string hex() const;
};

Fingerprint fingerprint(std::string_view bytes);

struct FingerprintHash {
  size_t operator()(const Fingerprint& f) const { return static_cast<size_t>(f.hi ^ (f.lo * 31)); }
};

}  // namespace tpu::cache
