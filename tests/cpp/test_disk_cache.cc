// The disk tier of the compilation cache: round trip, corrupt/truncated/foreign entries are
// rejected and deleted, the size bound evicts the least recently used entries.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cache/disk_cache.h"

namespace fs = std::filesystem;
using tpu::cache::DiskCache;
using tpu::cache::fingerprint;

namespace {

std::string fresh_dir(const char* name) {
  const std::string dir = (fs::temp_directory_path() / ("tpu_disk_cache_" + std::string(name) + "_" +
                                                          std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  return dir;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST(DiskCache, StoresAndLoadsAcrossInstances) {
  const std::string dir = fresh_dir("roundtrip");
  const auto key = fingerprint("program one");
  DiskCache(dir, 1 << 20).store(key, std::string("payload\0bytes", 13));
  DiskCache again(dir, 1 << 20);
  auto loaded = again.load(key);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(*loaded, std::string("payload\0bytes", 13));
  EXPECT_EQ(again.stats().loads, 1);
  EXPECT_FALSE(again.load(fingerprint("another program")).has_value());
  EXPECT_EQ(again.stats().rejected, 0);
  fs::remove_all(dir);
}

TEST(DiskCache, RejectsCorruptTruncatedAndForeignEntries) {
  const std::string dir = fresh_dir("corrupt");
  DiskCache cache(dir, 1 << 20);
  const auto a = fingerprint("a");
  const auto b = fingerprint("b");
  const auto c = fingerprint("c");
  cache.store(a, std::string(1000, 'x'));
  cache.store(b, std::string(1000, 'y'));
  cache.store(c, std::string(1000, 'z'));

  std::string bytes = read_all(cache.path_of(a));
  bytes[bytes.size() - 10] ^= 0x5a;  // flipped payload byte
  write_all(cache.path_of(a), bytes);
  write_all(cache.path_of(b), read_all(cache.path_of(b)).substr(0, 500));  // truncated
  write_all(cache.path_of(c), read_all(cache.path_of(a)));  // another key's entry

  EXPECT_FALSE(cache.load(a).has_value());
  EXPECT_FALSE(cache.load(b).has_value());
  EXPECT_FALSE(cache.load(c).has_value());
  EXPECT_EQ(cache.stats().rejected, 3);
  EXPECT_FALSE(fs::exists(cache.path_of(a)));  // deleted, to be replaced by a recompile
  EXPECT_FALSE(fs::exists(cache.path_of(b)));
  fs::remove_all(dir);
}

TEST(DiskCache, EvictsLeastRecentlyUsedBeyondTheBound) {
  const std::string dir = fresh_dir("evict");
  DiskCache cache(dir, 2500, "sse2");  // room for two 1000-byte payloads with headers
  cache.store(fingerprint("1"), std::string(1000, '1'));
  cache.store(fingerprint("2"), std::string(1000, '2'));
  fs::last_write_time(cache.path_of(fingerprint("1")),
                      fs::file_time_type::clock::now() - std::chrono::hours(1));
  cache.store(fingerprint("3"), std::string(1000, '3'));
  EXPECT_LE(cache.bytes_on_disk(), 2500u);
  EXPECT_EQ(cache.stats().evicted, 1);
  EXPECT_FALSE(cache.load(fingerprint("1")).has_value());  // the oldest went
  EXPECT_TRUE(cache.load(fingerprint("3")).has_value());
  cache.clear();
  EXPECT_EQ(cache.bytes_on_disk(), 0u);
  fs::remove_all(dir);
}

TEST(DiskCache, DisabledWithAnEmptyDirectory) {
  DiskCache cache("", 1 << 20);
  EXPECT_FALSE(cache.enabled());
  cache.store(fingerprint("x"), "y");
  EXPECT_FALSE(cache.load(fingerprint("x")).has_value());
  EXPECT_EQ(cache.stats().writes, 0);
}
