#include "common/env_flag.h"

#include <cstdlib>
#include <cstring>

namespace tpu {

bool env_flag(const char* name, bool unset) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return unset;
  return std::strcmp(v, "0") != 0;
}

}  // namespace tpu
