#include "cache/fingerprint.h"

#include <cstdio>

namespace tpu::cache {

Fingerprint fingerprint(std::string_view bytes) {
  uint64_t a = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  uint64_t c = 0x84222325cbf29ce4ull;  // a second, different basis
  for (unsigned char ch : bytes) {
    a = (a ^ ch) * 0x100000001b3ull;
    c = (c ^ ch) * 0x00000100000001b3ull + 0x9e3779b97f4a7c15ull;
  }
  a ^= bytes.size();
  c ^= bytes.size() * 0x9e3779b97f4a7c15ull;
  return Fingerprint{a, c};
}

std::string Fingerprint::hex() const {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

}  // namespace tpu::cache
