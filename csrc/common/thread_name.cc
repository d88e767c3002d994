#include "common/thread_name.h"

#include <algorithm>
#include <cstring>
#include <string>

#if defined(__linux__)
#include <pthread.h>
#endif

namespace tpu {

void name_this_thread(const char* name) {
#if defined(__linux__)
  const std::string cut(name, std::min<size_t>(std::strlen(name), 15));
  pthread_setname_np(pthread_self(), cut.c_str());
#else
  (void)name;
#endif
}

}  // namespace tpu
