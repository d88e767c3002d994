// The group launcher (runtime/group_launcher.h): one thread per device runs the launches that
// meet other ranks, in the order they were handed over, while the pushing thread goes on; a
// reader of a buffer such a launch promises waits for that buffer alone.
#include "runtime/group_launcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace tpu::runtime {
namespace {

TEST(GroupLauncher, RunsTasksInOrderOnItsOwnThreadWhileThePusherGoesOn) {
  GroupLauncher& launcher = GroupLauncher::of(7);
  std::atomic<bool> release{false};
  std::vector<int> order;
  std::thread::id ran_on;
  launcher.push([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ran_on = std::this_thread::get_id();
    order.push_back(1);
  });
  launcher.push([&] { order.push_back(2); });
  // The first task is still waiting: push returned at once, and the device counts as pending.
  EXPECT_TRUE(GroupLauncher::pending_on(7));
  EXPECT_FALSE(launcher.empty());
  release.store(true);
  launcher.drain();
  EXPECT_TRUE(launcher.empty());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(GroupLauncher::pending_on(7));
}

TEST(GroupLauncher, AReaderWaitsForItsBufferAloneAndSeesTheFailure) {
  GroupLauncher& launcher = GroupLauncher::of(8);
  auto first = std::make_shared<pjrt::Buffer>(nullptr);   // promised
  auto second = std::make_shared<pjrt::Buffer>(nullptr);  // promised by a later task
  std::atomic<bool> release{false};
  launcher.push([first] { first->fail("torch_tpu: the ranks' programs differ"); });
  launcher.push([second, &release] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    second->fail("torch_tpu: later");
  });
  GroupLauncher::await_resolved(*first);  // returns while the second task still waits
  EXPECT_FALSE(first->unresolved());
  EXPECT_TRUE(second->unresolved());
  EXPECT_THROW(first->raw(), std::runtime_error);
  release.store(true);
  GroupLauncher::await_resolved(*second);
  EXPECT_FALSE(second->unresolved());
  launcher.drain();
}

TEST(GroupLauncher, ABufferNoTaskWillResolveDoesNotHangItsReader) {
  pjrt::Buffer orphan(nullptr);  // promised by nothing queued here
  GroupLauncher::await_resolved(orphan);
  EXPECT_TRUE(orphan.unresolved());
}

}  // namespace
}  // namespace tpu::runtime
