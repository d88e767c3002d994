// common/thread_name.h: a thread names itself, cut to the 15 characters Linux keeps; the
// background compile worker carries its name.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>

#include "common/thread_name.h"
#include "exec/background_compiles.h"

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tpu {
namespace {

#if defined(__linux__)
std::string own_name() {
  std::ifstream f("/proc/self/task/" + std::to_string(syscall(SYS_gettid)) + "/comm");
  std::string name;
  std::getline(f, name);
  return name;
}

TEST(ThreadName, NamesTheCallingThreadCutTo15Characters) {
  std::string short_name, long_name;
  std::thread([&] {
    name_this_thread("tpu_test");
    short_name = own_name();
    name_this_thread("tpu_a_name_longer_than_fifteen");
    long_name = own_name();
  }).join();
  EXPECT_EQ(short_name, "tpu_test");
  EXPECT_EQ(long_name, "tpu_a_name_long");
}

TEST(ThreadName, TheBackgroundCompileWorkerIsNamed) {
  std::string name;
  auto& compiles = exec::BackgroundCompiles::get();
  compiles.submit(cache::fingerprint("thread name test"), [&] { name = own_name(); });
  compiles.wait_idle();
  EXPECT_EQ(name, "tpu_compile");
}
#endif

}  // namespace
}  // namespace tpu
