#include "common/env_flag.h"

#include <cstdlib>
#include <cstring>

namespace tpu {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace tpu
