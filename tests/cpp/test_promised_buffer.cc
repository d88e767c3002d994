// Promised buffers (pjrt/buffer.h): a Buffer created before the execution that produces it;
// every use waits through the runtime's waiter, then sees the fulfilled buffer or the failure.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "test_support.h"

namespace tpu {
namespace {

// The waiter fulfils `pending` from another thread, as the launcher would.
std::shared_ptr<pjrt::Buffer> pending;
std::unique_ptr<pjrt::Buffer> source;
std::atomic<int> waits{0};

void fulfil_from_another_thread() {
  ++waits;
  std::thread([] { pending->fulfil(source->release()); }).join();
}

TEST(PromisedBuffer, UseWaitsForTheFulfilment) {
  const auto& client = testing::cpu_client();
  std::vector<float> host{1, 2, 3};
  source = std::move(client.buffer_from_host(host.data(), ElementType::kF32, {3}, 1,
                                              pjrt::HostBufferSemantics::kCopyDuringCall)
                         .buffer);
  pending = std::make_shared<pjrt::Buffer>(client.api());
  EXPECT_TRUE(pending->unresolved());
  pjrt::Buffer::set_promise_waiter(&fulfil_from_another_thread);
  std::vector<float> back(3);
  pending->to_host(back.data(), back.size() * 4);  // waits, then reads
  EXPECT_EQ(back, host);
  EXPECT_EQ(waits.load(), 1);
  EXPECT_FALSE(pending->unresolved());
  pending->to_host(back.data(), back.size() * 4);  // fulfilled: no second wait
  EXPECT_EQ(waits.load(), 1);
  pjrt::Buffer::set_promise_waiter(nullptr);
  pending.reset();
  source.reset();
}

TEST(PromisedBuffer, FailureIsRaisedWithItsMessage) {
  const auto& client = testing::cpu_client();
  pjrt::Buffer failed(client.api());
  failed.fail("torch_tpu: device error in aten::add: boom");
  EXPECT_FALSE(failed.unresolved());
  try {
    failed.raw();
    FAIL() << "a failed promise must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "torch_tpu: device error in aten::add: boom");
  }
}

TEST(PromisedBuffer, NeverFulfilledIsALogicError) {
  const auto& client = testing::cpu_client();
  pjrt::Buffer never(client.api());
  EXPECT_THROW(never.raw(), std::logic_error);  // no waiter installed: nothing will fulfil it
}

}  // namespace
}  // namespace tpu
