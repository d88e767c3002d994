// A disk cache this process can trust (cache/trusted_dir.h, cache/sha256.h): the directory is
// private, a directory others could write is refused, and an entry not signed with the
// directory's key - planted with a valid plain checksum, or taken from another cache - is
// rejected and deleted, never loaded.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "cache/disk_cache.h"
#include "cache/sha256.h"
#include "cache/trusted_dir.h"

namespace fs = std::filesystem;
using tpu::cache::DiskCache;
using tpu::cache::fingerprint;

namespace {

std::string hex(const tpu::cache::Digest& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s.push_back(digits[b >> 4]);
    s.push_back(digits[b & 15]);
  }
  return s;
}

std::string fresh_dir(const char* name) {
  const std::string dir = (fs::temp_directory_path() / ("tpu_trusted_cache_" + std::string(name) + "_" +
                                                          std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  return dir;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return st.st_mode & 07777;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// TORCH_TPU_CACHE_SHARED for the life of a scope.
struct SharedCache {
  SharedCache() { ::setenv("TORCH_TPU_CACHE_SHARED", "1", 1); }
  ~SharedCache() { ::unsetenv("TORCH_TPU_CACHE_SHARED"); }
};

}  // namespace

TEST(Sha256, KnownAnswers) {
  using tpu::cache::sha256;
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  tpu::cache::Sha256 pieces;  // a million 'a's, fed in uneven pieces
  const std::string chunk(997, 'a');
  size_t fed = 0;
  for (; fed + chunk.size() <= 1000000; fed += chunk.size()) pieces.update(chunk);
  pieces.update(std::string(1000000 - fed, 'a'));
  EXPECT_EQ(hex(pieces.finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, HmacKnownAnswers) {  // RFC 4231 test cases 1, 2 and 6 (a key longer than a block)
  using tpu::cache::hmac_sha256;
  EXPECT_EQ(hex(hmac_sha256(std::string(20, '\x0b'), {"Hi There"})),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmac_sha256("Jefe", {"what do ya want ", "for nothing?"})),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(hmac_sha256(std::string(131, '\xaa'), {"Test Using Larger Than Block-Size Key - Hash Key First"})),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(TrustedCache, CreatesAPrivateDirectoryAndKey) {
  const std::string dir = fresh_dir("private") + "/nested/cache";
  DiskCache cache(dir, 1 << 20);
  ASSERT_TRUE(cache.enabled()) << cache.refused();
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(mode_of(dir + "/key"), 0600u);
  EXPECT_EQ(fs::file_size(dir + "/key"), 32u);
  // An existing directory of ours that others may read is made private.
  const std::string open = fresh_dir("readable");
  fs::create_directories(open);
  ::chmod(open.c_str(), 0755);
  EXPECT_TRUE(DiskCache(open, 1 << 20).enabled());
  EXPECT_EQ(mode_of(open), 0700u);
  fs::remove_all(fresh_dir("private"));
  fs::remove_all(open);
}

TEST(TrustedCache, RefusesADirectoryOthersCanWrite) {
  const std::string dir = fresh_dir("writable");
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0777);
  DiskCache cache(dir, 1 << 20);
  EXPECT_FALSE(cache.enabled());
  EXPECT_NE(cache.refused().find("others can write it (mode 0777)"), std::string::npos) << cache.refused();
  EXPECT_NE(cache.refused().find("chmod 700 " + dir), std::string::npos);
  EXPECT_NE(cache.refused().find("TORCH_TPU_CACHE_SHARED=1"), std::string::npos);
  cache.store(fingerprint("p"), "code");
  EXPECT_FALSE(fs::exists(cache.path_of(fingerprint("p"))));
  EXPECT_FALSE(fs::exists(dir + "/key"));
  {
    SharedCache shared;  // deliberate sharing: a group-writable directory is used
    ::chmod(dir.c_str(), 02770);
    DiskCache team(dir, 1 << 20);
    EXPECT_TRUE(team.enabled()) << team.refused();
    EXPECT_EQ(mode_of(dir + "/key"), 0640u);  // the team's members read the key
    ::chmod(dir.c_str(), 0777);  // but never one everybody can write: they could swap the key
    EXPECT_FALSE(DiskCache(dir, 1 << 20).enabled());
  }
  fs::remove_all(dir);
}

TEST(TrustedCache, RefusesADirectoryOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the directory to another user";
  const std::string dir = fresh_dir("owner");
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  DiskCache cache(dir, 1 << 20);
  EXPECT_FALSE(cache.enabled());
  EXPECT_NE(cache.refused().find("belongs to another user (uid 65534)"), std::string::npos) << cache.refused();
  fs::remove_all(dir);
}

TEST(TrustedCache, RejectsEntriesNotSignedWithTheDirectorysKey) {
  const std::string dir = fresh_dir("signed");
  const std::string other_dir = fresh_dir("other");
  const auto key = fingerprint("program");
  DiskCache cache(dir, 1 << 20, "sse2");
  DiskCache other(other_dir, 1 << 20, "sse2");
  cache.store(key, "genuine code");
  ASSERT_EQ(cache.load(key).value(), "genuine code");

  // Another cache's entry for the same key: a whole, well-formed file, with another key's MAC.
  other.store(key, "planted code");
  fs::copy_file(other.path_of(key), cache.path_of(key), fs::copy_options::overwrite_existing);
  EXPECT_FALSE(cache.load(key).has_value());
  EXPECT_EQ(cache.stats().rejected, 1);
  EXPECT_FALSE(fs::exists(cache.path_of(key)));  // deleted: the next compile replaces it

  // A planted entry whose checksum field holds a valid plain (unkeyed) SHA-256 of its contents.
  cache.store(key, "genuine code");
  std::string bytes = read_all(cache.path_of(key));
  const size_t mac_at = bytes.size() - std::string("sse2genuine code").size() - 32;
  std::string forged = bytes.substr(0, mac_at);
  const std::string body = "sse2planted code";
  forged[mac_at - 8] = static_cast<char>(body.size() - 4);  // payload size (little end)
  const tpu::cache::Digest plain = tpu::cache::sha256(forged + body);
  forged.append(reinterpret_cast<const char*>(plain.data()), plain.size());
  forged += body;
  std::ofstream(cache.path_of(key), std::ios::binary | std::ios::trunc) << forged;
  EXPECT_FALSE(cache.load(key).has_value());
  EXPECT_EQ(cache.stats().rejected, 2);

  // A key file others can read is refused (anyone who reads it can sign entries).
  ::chmod((dir + "/key").c_str(), 0644);
  DiskCache exposed(dir, 1 << 20);
  EXPECT_FALSE(exposed.enabled());
  EXPECT_NE(exposed.refused().find("chmod 600"), std::string::npos) << exposed.refused();
  fs::remove_all(dir);
  fs::remove_all(other_dir);
}
