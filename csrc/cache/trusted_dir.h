// The disk cache's directory as something this process may trust. Its entries are machine code
// the process loads and runs, so an entry another user could write is code they run as us:
//   - the directory is created 0700 (an existing one of ours is tightened to 0700);
//   - a directory another user owns, or that group or others can write, is refused - unless
//     TORCH_TPU_CACHE_SHARED=1 says a team shares it deliberately (docs/design.md, "A cache you
//     can trust");
//   - the directory keeps a random 32-byte key (`key`, mode 0600; 0640 when shared) with which
//     every entry is signed (HMAC-SHA256, cache/sha256.h): an entry written without the key -
//     planted, or altered - is rejected and recompiled, never loaded.
#pragma once

#include <string>

namespace tpu::cache {

struct TrustedDir {
  bool trusted = false;
  std::string why;  // when refused: what is wrong and how to fix it
  std::string key;  // the signing key (32 bytes) when trusted
};

// Prepares `dir` (creating it and its key when missing) and checks it.
TrustedDir open_trusted_dir(const std::string& dir, bool shared);

// TORCH_TPU_CACHE_SHARED is set to a true value.
bool shared_cache_from_environment();

}  // namespace tpu::cache
