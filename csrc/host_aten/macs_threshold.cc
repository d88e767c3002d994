#include "host_aten/macs_threshold.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace tpu::host_aten {
namespace {

double read(const char* env, double fallback) {
  const char* v = std::getenv(env);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(d >= 0)) {
    char shown[32];
    std::snprintf(shown, sizeof(shown), "%g", fallback);
    throw std::runtime_error(std::string(env) + "='" + v +
                             "' is not a number of multiply-adds. Fix: set it to a number >= 0 (0: every "
                             "float32 call takes the host kernel), or unset it (default " + shown + ").");
  }
  return d;
}

}  // namespace

MacsThreshold::MacsThreshold(const char* env, double fallback) : value_(read(env, fallback)) {}

}  // namespace tpu::host_aten
