// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): the keyed checksum of disk cache entries
// (cache/disk_cache.h), so an entry written without the cache's key is never loaded.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace tpu::cache {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  Digest finish();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t used_ = 0;
  uint64_t total_ = 0;
};

Digest sha256(std::string_view bytes);
// HMAC-SHA256 of the concatenation of `parts` under `key`.
Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);
// Compares in time independent of where the digests differ.
bool same_digest(const Digest& a, const Digest& b);

}  // namespace tpu::cache
