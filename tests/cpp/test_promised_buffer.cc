// Promised buffers (pjrt/buffer.h): a Buffer created before the execution that produces it;
// every use waits through the runtime's waiter, then sees the fulfilled buffer or the failure.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pjrt/compile_options.h"
#include "test_support.h"

namespace tpu {
namespace {

const char* kDouble = R"(
module @m {
  func.func public @main(%a: tensor<3xf32>) -> (tensor<3xf32>) {
    %0 = "stablehlo.add"(%a, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    "func.return"(%0) : (tensor<3xf32>) -> ()
  }
})";

// The waiter launches the producing execution from another thread, as the launcher would, and
// fulfils `pending` with its (owned) output.
std::shared_ptr<pjrt::Buffer> pending;
std::unique_ptr<pjrt::LoadedExecutable> exe;
std::unique_ptr<pjrt::Buffer> input;
std::atomic<int> waits{0};

void launch_from_another_thread(const pjrt::Buffer& promised) {
  EXPECT_EQ(&promised, pending.get());  // the waiter is told which buffer is wanted
  ++waits;
  std::thread([] {
    const auto& client = testing::cpu_client();
    PJRT_Buffer* args[] = {input->raw()};
    PJRT_Buffer* out = nullptr;
    PJRT_Event* done = exe->execute_raw(args, 1, client.devices()[0].raw, {}, &out);
    if (done != nullptr) pjrt::Event(client.api(), done).await();
    pending->fulfil(out);
  }).join();
}

TEST(PromisedBuffer, UseWaitsForTheFulfilment) {
  const auto& client = testing::cpu_client();
  std::vector<float> host{1, 2, 3};
  input = std::move(client.buffer_from_host(host.data(), ElementType::kF32, {3}, 0,
                                             pjrt::HostBufferSemantics::kCopyDuringCall)
                        .buffer);
  exe = client.compile(kDouble, pjrt::serialize(pjrt::CompileOptions{}));
  pending = std::make_shared<pjrt::Buffer>(client.api());
  EXPECT_TRUE(pending->unresolved());
  pjrt::Buffer::set_promise_waiter(&launch_from_another_thread);
  std::vector<float> back(3);
  pending->to_host(back.data(), back.size() * 4);  // waits, then reads
  EXPECT_EQ(back, (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(waits.load(), 1);
  EXPECT_FALSE(pending->unresolved());
  pending->to_host(back.data(), back.size() * 4);  // fulfilled: no second wait
  EXPECT_EQ(waits.load(), 1);
  pjrt::Buffer::set_promise_waiter(nullptr);
  pending.reset();
  exe.reset();
  input.reset();
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
