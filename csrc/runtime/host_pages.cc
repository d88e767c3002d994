#include "runtime/host_pages.h"

#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tpu::runtime {

bool apply_host_pages_policy(PluginKind kind, const EnvLookup& env) {
  bool keep = kind == PluginKind::kXlaCpu;
  bool one_arena = keep;
  if (const char* v = env("TORCH_TPU_HOST_PAGES")) {
    if (std::strcmp(v, "keep") == 0) {
      keep = one_arena = true;
    } else if (std::strcmp(v, "keep-arenas") == 0) {
      keep = true;
      one_arena = false;
    } else if (std::strcmp(v, "release") == 0) {
      keep = one_arena = false;
    } else {
      throw std::runtime_error(std::string("TORCH_TPU_HOST_PAGES='") + v +
                               "' is not one of keep, keep-arenas, release");
    }
  }
#if defined(__GLIBC__)
  if (keep) {
    // Threads started from now on (the plugin's) share the main heap: a thread's own arena
    // unmaps a secondary heap as soon as it is empty, whatever the trim threshold.
    if (one_arena) mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_MAX, 0);               // large blocks from the heap, reused after free
    mallopt(M_TRIM_THRESHOLD, INT_MAX);  // the heap's free top stays mapped
  }
  return keep;
#else
  (void)one_arena;
  return false;  // other C libraries: their own policy
#endif
}

}  // namespace tpu::runtime
