// A quiet, safe warm start: disk cache entries carry the compiling machine's CPU record and are
// not loaded on a CPU lacking one of its features; loading an executable prints nothing but
// real problems (the XLA CPU loader's tuning-feature false alarm is dropped, nothing else).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cache/disk_cache.h"
#include "cache/host_cpu.h"
#include "pjrt/compile_options.h"
#include "pjrt/stderr_filter.h"
#include "test_support.h"

namespace fs = std::filesystem;
using tpu::cache::DiskCache;
using tpu::cache::fingerprint;

namespace {

std::string fresh_dir(const char* name) {
  const std::string dir = (fs::temp_directory_path() / ("tpu_machine_record_" + std::string(name) +
                                                          "_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  return dir;
}

// The loader's message as the plugin prints it (shortened).
std::string loader_line(const std::string& feature) {
  return "E0000 00:00:1796041514.448309    2810 cpu_aot_loader.cc:195] Loading XLA:CPU AOT result. "
         "Target machine feature +" + feature + " is not  supported on the host machine. Compile "
         "machine features: [+avx512f,+prefer-no-gather] vs host machine features: [avx512f]. "
         "This could lead to execution errors such as SIGILL.\n";
}

const char* kPreface =
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n";

const char* kAdd = tpu::testing::kAddProgram;

}  // namespace

TEST(HostCpuRecord, DescribesThisMachine) {
  const std::string& record = tpu::cache::host_cpu_record();
  EXPECT_NE(record.find("arch:"), std::string::npos) << record;
  EXPECT_EQ(tpu::cache::canonical_record(record), record);  // already sorted and unique
  EXPECT_EQ(tpu::cache::missing_features(record, record), "");
}

TEST(HostCpuRecord, MissingFeaturesAreTheRecordedOnesTheHostLacks) {
  EXPECT_EQ(tpu::cache::canonical_record("  sse2 avx2\tsse2 avx "), "avx avx2 sse2");
  EXPECT_EQ(tpu::cache::missing_features("sse2 avx2", "avx avx2 sse2"), "");  // newer host
  EXPECT_EQ(tpu::cache::missing_features("sse2 avx512f avx2", "sse2 avx2"), "avx512f");
  EXPECT_EQ(tpu::cache::missing_features("", "sse2"), "");
}

TEST(DiskCacheMachineRecord, EntryFromACpuWithMoreFeaturesIsAMiss) {
  const std::string dir = fresh_dir("mismatch");
  const auto key = fingerprint("program");
  DiskCache(dir, 1 << 20, "arch:x86_64 avx2 avx512f sse2").store(key, "code using avx512");

  DiskCache older(dir, 1 << 20, "arch:x86_64 avx2 sse2");
  EXPECT_FALSE(older.load(key).has_value());
  EXPECT_EQ(older.stats().host_mismatch, 1);
  EXPECT_EQ(older.stats().loads, 0);
  EXPECT_EQ(older.stats().rejected, 0);  // intact: kept until the recompile replaces it
  EXPECT_TRUE(fs::exists(older.path_of(key)));

  older.store(key, "code for avx2");  // the recompile
  auto mine = older.load(key);
  ASSERT_TRUE(mine.has_value());
  EXPECT_EQ(*mine, "code for avx2");

  DiskCache newer(dir, 1 << 20, "arch:x86_64 avx2 avx512f avx512vl sse2");  // has all it needs
  auto loaded = newer.load(key);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(*loaded, "code for avx2");
  EXPECT_EQ(newer.stats().host_mismatch, 0);
  fs::remove_all(dir);
}

TEST(DiskCacheMachineRecord, TamperedRecordIsRejectedAsCorrupt) {
  const std::string dir = fresh_dir("tamper");
  const auto key = fingerprint("program");
  DiskCache cache(dir, 1 << 20, "avx512f sse2");
  cache.store(key, "payload");
  std::string bytes;
  {
    std::ifstream in(cache.path_of(key), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = bytes.find("avx512f");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 7, "avx2xxx");  // claims other features: the checksum no longer matches
  std::ofstream(cache.path_of(key), std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_FALSE(cache.load(key).has_value());
  EXPECT_EQ(cache.stats().rejected, 1);
  fs::remove_all(dir);
}

TEST(StderrFilter, DropsOnlyTheTuningFeatureFalseAlarm) {
  using tpu::pjrt::is_tuning_feature_false_alarm;
  EXPECT_TRUE(is_tuning_feature_false_alarm(loader_line("prefer-no-gather")));
  EXPECT_TRUE(is_tuning_feature_false_alarm(loader_line("prefer-no-scatter")));
  EXPECT_FALSE(is_tuning_feature_false_alarm(loader_line("avx512f")));  // a real mismatch
  EXPECT_FALSE(is_tuning_feature_false_alarm("E0000 other.cc:1] Target machine feature +prefer-no-gather\n"));
  EXPECT_FALSE(is_tuning_feature_false_alarm("some unrelated error\n"));
}

TEST(StderrFilter, FilterLinesKeepsEverythingElseInOrder) {
  using tpu::pjrt::filter_lines;
  using tpu::pjrt::is_tuning_feature_false_alarm;
  const std::string noise = loader_line("prefer-no-gather") + loader_line("prefer-no-scatter");
  EXPECT_EQ(filter_lines(kPreface + noise, is_tuning_feature_false_alarm), "");
  const std::string real = loader_line("avx512f");
  EXPECT_EQ(filter_lines(kPreface + real + noise, is_tuning_feature_false_alarm), kPreface + real);
  EXPECT_EQ(filter_lines("a\n" + noise + "b\nno newline", is_tuning_feature_false_alarm),
            "a\nb\nno newline");
}

TEST(StderrFilter, CapturesFileDescriptorTwoAndWritesBackWhatItKeeps) {
  ::testing::internal::CaptureStderr();
  {
    tpu::pjrt::StderrFilter quiet(tpu::pjrt::is_tuning_feature_false_alarm);
    const std::string text = "before\n" + loader_line("prefer-no-gather") + "after\n";
    ASSERT_EQ(::write(STDERR_FILENO, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "before\nafter\n");
}

TEST(StderrFilter, LoadingAnExecutableOnThisMachinePrintsNothing) {
  const auto& client = tpu::testing::cpu_client();
  auto exe = client.compile(kAdd, tpu::pjrt::serialize(tpu::pjrt::CompileOptions{}));
  const std::string bytes = exe->serialize();
  ::testing::internal::CaptureStderr();
  auto again = client.deserialize(bytes);
  auto twice = client.deserialize(bytes);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_NE(again, nullptr);
  EXPECT_NE(twice, nullptr);
}
