// runtime/transfers: host <-> device and device <-> device round trips through the XLA CPU
// plugin, blocking and asynchronous, and how errors surface.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/transfers.h"
#include "test_support.h"

namespace tpu {
namespace {

const pjrt::Client& client() { return testing::cpu_client(); }

std::vector<float> iota_floats(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), -3.5f);
  return v;
}

TEST(Transfers, UploadThenDownloadRoundTrips) {
  runtime::WorkTracker tracker(0);
  const std::vector<float> host = iota_floats(6);
  auto buffer = runtime::upload(client(), host.data(), ElementType::kF32, {2, 3}, 0);
  EXPECT_EQ(buffer->dims(), (hlo::Dims{2, 3}));
  EXPECT_EQ(buffer->element_type(), ElementType::kF32);
  std::vector<float> back(6, 0.0f);
  runtime::download(*buffer, back.data(), back.size() * sizeof(float), "test upload", tracker);
  EXPECT_EQ(back, host);
}

TEST(Transfers, UploadCopiesDuringTheCall) {
  runtime::WorkTracker tracker(0);
  std::vector<int64_t> host{1, 2, 3};
  auto buffer = runtime::upload(client(), host.data(), ElementType::kI64, {3}, 1);
  host.assign(3, -1);  // the caller may reuse its memory at once
  std::vector<int64_t> back(3);
  runtime::download(*buffer, back.data(), back.size() * sizeof(int64_t), "test upload", tracker);
  EXPECT_EQ(back, (std::vector<int64_t>{1, 2, 3}));
}

TEST(Transfers, AsyncUploadKeepsTheHostOwnerUntilTransferred) {
  runtime::WorkTracker tracker(0);
  auto host = std::make_shared<std::vector<float>>(iota_floats(1024));
  std::weak_ptr<std::vector<float>> watch = host;
  const void* data = host->data();
  auto buffer = runtime::upload_async(client(), data, ElementType::kF32, {1024}, 0, std::move(host), tracker);
  std::vector<float> back(1024);
  runtime::download(*buffer, back.data(), back.size() * sizeof(float), "test async upload", tracker);
  EXPECT_EQ(back, iota_floats(1024));
  tracker.synchronize();
  EXPECT_TRUE(watch.expired());  // released once the plugin no longer reads it
}

TEST(Transfers, AsyncDownloadIsCompleteAfterSynchronize) {
  runtime::WorkTracker tracker(0);
  const std::vector<float> host = iota_floats(512);
  auto buffer = runtime::upload(client(), host.data(), ElementType::kF32, {512}, 0);
  std::vector<float> back(512, 0.0f);
  runtime::download_async(buffer, back.data(), back.size() * sizeof(float), tracker);
  tracker.synchronize();
  EXPECT_EQ(back, host);
}

TEST(Transfers, AdoptedUploadRoundTrips) {
  runtime::WorkTracker tracker(0);
  std::vector<double> host{0.5, -2.0, 8.25, 1e300};
  runtime::AdoptedUpload up = runtime::upload_adopting(client(), host.data(), ElementType::kF64, {4}, 0);
  std::vector<double> back(4);
  runtime::download(*up.buffer, back.data(), back.size() * sizeof(double), "test adopted upload", tracker);
  EXPECT_EQ(back, host);
  // The buffer may be `host` itself (zero-copy when the plugin finds the memory aligned enough):
  // then the plugin is done with `host` only once the buffer is gone, so drop the buffer first and
  // only then wait (waiting first deadlocks whenever the vector happens to be aligned).
  std::shared_ptr<pjrt::Event> done = std::move(up.done_with_host);
  up.buffer.reset();
  if (done) done->await();
}

TEST(Transfers, CopyToAnotherDeviceRoundTrips) {
  runtime::WorkTracker tracker(0);
  const std::vector<float> host = iota_floats(8);
  auto on0 = runtime::upload(client(), host.data(), ElementType::kF32, {8}, 0);
  auto on1 = runtime::copy_to_device(*on0, client().devices()[1]);
  on0.reset();
  std::vector<float> back(8);
  runtime::download(*on1, back.data(), back.size() * sizeof(float), "test copy", tracker);
  EXPECT_EQ(back, host);
}

TEST(Transfers, DownloadOfALostBufferNamesItsWriter) {
  runtime::WorkTracker tracker(0);
  const std::vector<float> host = iota_floats(4);
  auto buffer = runtime::upload(client(), host.data(), ElementType::kF32, {4}, 0);
  buffer->release_memory();  // as a device fault would
  std::vector<float> back(4);
  try {
    runtime::download(*buffer, back.data(), back.size() * sizeof(float), "aten::test_writer", tracker);
    FAIL() << "reading a deleted buffer should throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("aten::test_writer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tpu
