#include "cache/trusted_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "common/env_flag.h"

namespace tpu::cache {

namespace fs = std::filesystem;

namespace {

constexpr const char* kKeyName = "key";
constexpr size_t kKeyBytes = 32;
constexpr const char* kSharedHint = " (or, if a team shares this cache on purpose, set TORCH_TPU_CACHE_SHARED=1)";

std::string octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

TrustedDir refuse(std::string why) { return TrustedDir{false, std::move(why), {}}; }

std::string random_key() {
  std::string key(kKeyBytes, '\0');
  std::random_device rd;  // /dev/urandom on Linux
  for (size_t i = 0; i < kKeyBytes; i += 4) {
    const uint32_t r = rd();
    std::memcpy(key.data() + i, &r, 4);
  }
  return key;
}

// The key at `path`, checked; empty with `why` set when it cannot be used.
std::string read_key(const std::string& path, bool shared, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = "could not read its key " + path + ": " + std::strerror(errno);
    return {};
  }
  struct stat st {};
  std::string key(kKeyBytes + 1, '\0');
  const bool stated = ::fstat(fd, &st) == 0;
  const ssize_t n = stated ? ::read(fd, key.data(), key.size()) : -1;
  ::close(fd);
  const mode_t open_bits = shared ? 0007 : 0077;
  if (!stated || !S_ISREG(st.st_mode) || n != static_cast<ssize_t>(kKeyBytes)) {
    *why = "its key " + path + " is not a " + std::to_string(kKeyBytes) + "-byte file (fix: delete it)";
  } else if (!shared && st.st_uid != ::geteuid()) {
    *why = "its key " + path + " belongs to another user (uid " + std::to_string(st.st_uid) + ")";
  } else if (st.st_mode & open_bits) {
    *why = "its key " + path + " has mode " + octal(st.st_mode) + " (fix: chmod " + (shared ? "640" : "600") + " " + path + ")";
  }
  if (!why->empty()) return {};
  key.resize(kKeyBytes);
  return key;
}

// The key at `path`, created first when missing.
std::string read_or_create_key(const std::string& path, bool shared, std::string* why) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return read_key(path, shared, why);
  const mode_t create_mode = shared ? 0640 : 0600;
  // Written whole under a private name, then linked into place: processes starting together see
  // no key or a whole one, and the first link wins.
  std::random_device rd;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, create_mode);
  if (fd < 0) {
    *why = "could not create its key " + path + ": " + std::strerror(errno);
    return {};
  }
  const std::string fresh = random_key();
  const bool written = ::write(fd, fresh.data(), fresh.size()) == static_cast<ssize_t>(fresh.size());
  ::fchmod(fd, create_mode);  // whatever the umask
  ::close(fd);
  const bool linked = written && ::link(tmp.c_str(), path.c_str()) == 0;
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (linked) return fresh;
  if (written && link_errno == EEXIST) return read_key(path, shared, why);  // another process won
  *why = "could not create its key " + path + ": " + std::strerror(written ? link_errno : errno);
  return {};
}

}  // namespace

bool shared_cache_from_environment() { return env_flag("TORCH_TPU_CACHE_SHARED"); }

TrustedDir open_trusted_dir(const std::string& dir, bool shared) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    const fs::path parent = fs::path(dir).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (::mkdir(dir.c_str(), shared ? 0770 : 0700) != 0 && errno != EEXIST) {
      return refuse("could not create it: " + std::string(std::strerror(errno)));
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return refuse("could not inspect it: " + std::string(std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) return refuse("it is not a directory");
  if (shared && (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
    // Anyone could replace the key itself, and then sign what they plant.
    return refuse("everyone can write it (mode " + octal(st.st_mode) + "), even with TORCH_TPU_CACHE_SHARED=1. "
                  "Fix: give the team a group and chmod 2770 " + dir);
  }
  if (!shared) {
    if (st.st_uid != ::geteuid()) {
      return refuse("it belongs to another user (uid " + std::to_string(st.st_uid) +
                    "), who could plant code this process would run. Fix: point TORCH_TPU_CACHE_DIR at a "
                    "directory of your own" + kSharedHint);
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
      return refuse("others can write it (mode " + octal(st.st_mode) + ") and could plant code this process "
                    "would run. Fix: chmod 700 " + dir + kSharedHint);
    }
    if ((st.st_mode & 0077) != 0) ::chmod(dir.c_str(), st.st_mode & 07700);  // ours: private
  }
  std::string why;
  std::string key = read_or_create_key(dir + "/" + kKeyName, shared, &why);
  if (key.empty()) return refuse(why);
  return TrustedDir{true, {}, std::move(key)};
}

}  // namespace tpu::cache
