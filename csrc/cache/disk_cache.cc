#include "cache/disk_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <vector>

#include "cache/sha256.h"
#include "cache/trusted_dir.h"

namespace tpu::cache {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'P', 'U', 'E', 'X', 'E', 'C', '\0'};
constexpr uint32_t kFormat = 3;  // 2: the machine record; 3: HMAC-SHA256 instead of a plain checksum
constexpr const char* kSuffix = ".tpuexe";
constexpr uint64_t kDefaultMaxBytes = 4ull << 30;

// magic, format, key (hi, lo), machine record size, payload size, then the HMAC-SHA256 under the
// directory's key of everything before it and of the machine record followed by the payload;
// then the machine record and the payload.
constexpr size_t kSignedHeaderBytes = sizeof(kMagic) + 4 + 16 + 4 + 8;
constexpr size_t kHeaderBytes = kSignedHeaderBytes + sizeof(Digest);

Digest signature(const std::string& key, std::string_view signed_header, std::string_view body) {
  return hmac_sha256(key, {signed_header, body});
}

std::mutex g_sink_mu;
std::function<void(const std::string&)> g_sink;

void warn(const std::string& message) {
  std::function<void(const std::string&)> sink;
  {
    std::lock_guard<std::mutex> lock(g_sink_mu);
    sink = g_sink;
  }
  if (sink) {
    sink(message);
  } else {
    std::fprintf(stderr, "%s\n", message.c_str());
  }
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
T get(const std::string& in, size_t& pos) {
  T v;
  std::memcpy(&v, in.data() + pos, sizeof(T));
  pos += sizeof(T);
  return v;
}

std::string default_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/torch_tpu";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::string(home) + "/.cache/torch_tpu";
  }
  return "";
}

uint64_t max_bytes_from_env() {
  const char* v = std::getenv("TORCH_TPU_CACHE_MAX_BYTES");
  if (v == nullptr || *v == '\0') return kDefaultMaxBytes;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*end != '\0' || n == 0) {
    throw std::runtime_error(std::string("TORCH_TPU_CACHE_MAX_BYTES='") + v +
                             "' is not a byte count. Fix: set a positive integer, or unset it "
                             "(default 4 GiB).");
  }
  return n;
}

struct EntryFile {
  fs::path path;
  uint64_t size;
  fs::file_time_type time;
};

// The cache entries now in `dir` (never throws: an unreadable directory has none).
std::vector<EntryFile> scan(const std::string& dir) {
  std::vector<EntryFile> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_regular_file(e2) || it->path().extension() != kSuffix) continue;
    const uint64_t size = it->file_size(e2);
    const auto time = it->last_write_time(e2);
    if (!e2) out.push_back({it->path(), size, time});
  }
  return out;
}

}  // namespace

DiskCache::DiskCache(std::string dir, uint64_t max_bytes, std::string machine)
    : dir_(std::move(dir)), max_bytes_(max_bytes), machine_(std::move(machine)) {
  if (dir_.empty()) return;
  TrustedDir trusted = open_trusted_dir(dir_, shared_cache_from_environment());
  if (!trusted.trusted) {
    refused_ = std::move(trusted.why);
    warn("torch_tpu: the compilation cache directory " + dir_ + " is not used (compiled programs are not "
         "kept on disk): " + refused_ + ".");
    dir_.clear();
    return;
  }
  key_ = std::move(trusted.key);
}

void DiskCache::set_warning_sink(std::function<void(const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  g_sink = std::move(sink);
}

void DiskCache::account(int64_t delta) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (tracked_bytes_ < 0) {
    tracked_bytes_ = 0;
    for (const EntryFile& e : scan(dir_)) tracked_bytes_ += static_cast<int64_t>(e.size);
  }
  tracked_bytes_ = std::max<int64_t>(0, tracked_bytes_ + delta);
}

DiskCache DiskCache::from_environment() {
  std::string dir;
  if (const char* v = std::getenv("TORCH_TPU_CACHE_DIR"); v && *v) {
    dir = v;
  } else {
    dir = default_dir();
  }
  if (dir == "disabled") dir.clear();
  return DiskCache(std::move(dir), max_bytes_from_env());
}

std::string DiskCache::path_of(const Fingerprint& key) const {
  return dir_ + "/" + key.hex() + kSuffix;
}

std::optional<std::string> DiskCache::load(const Fingerprint& key) {
  if (!enabled()) return std::nullopt;
  const std::string path = path_of(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  bool ok = bytes.size() >= kHeaderBytes && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0;
  size_t pos = sizeof(kMagic);
  if (ok) ok = get<uint32_t>(bytes, pos) == kFormat;
  if (ok) {
    Fingerprint stored;
    stored.hi = get<uint64_t>(bytes, pos);
    stored.lo = get<uint64_t>(bytes, pos);
    ok = stored == key;
  }
  uint32_t record_size = 0;
  uint64_t size = 0;
  Digest mac{};
  if (ok) {
    record_size = get<uint32_t>(bytes, pos);
    size = get<uint64_t>(bytes, pos);
    std::memcpy(mac.data(), bytes.data() + pos, mac.size());
    ok = bytes.size() - kHeaderBytes >= record_size && bytes.size() - kHeaderBytes - record_size == size;
  }
  // Written with this directory's key, and unchanged since.
  const std::string_view view(bytes);
  ok = ok && same_digest(signature(key_, view.substr(0, kSignedHeaderBytes), view.substr(kHeaderBytes)), mac);
  if (!ok) {
    reject(key);
    return std::nullopt;
  }
  const std::string record = bytes.substr(kHeaderBytes, record_size);
  if (!missing_features(record, machine_).empty()) {
    // Compiled on a CPU with extensions this one lacks: a miss, whose recompile replaces it.
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.host_mismatch;
    return std::nullopt;
  }
  std::string payload = bytes.substr(kHeaderBytes + record_size);
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // most recently used
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.loads;
  return payload;
}

void DiskCache::store(const Fingerprint& key, const std::string& payload) {
  if (!enabled()) return;
  std::error_code ec;
  std::string bytes(kMagic, sizeof(kMagic));
  put<uint32_t>(bytes, kFormat);
  put<uint64_t>(bytes, key.hi);
  put<uint64_t>(bytes, key.lo);
  put<uint32_t>(bytes, static_cast<uint32_t>(machine_.size()));
  put<uint64_t>(bytes, payload.size());
  const std::string body = machine_ + payload;
  const Digest mac = signature(key_, bytes, body);
  bytes.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  bytes += body;

  std::random_device rd;
  const std::string final_path = path_of(key);
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(rd());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  account(0);  // the directory's size is known before this entry changes it
  std::error_code size_ec;
  const auto replaced = fs::file_size(final_path, size_ec);
  fs::rename(tmp, final_path, ec);  // atomic on POSIX: readers see the old or the new file
  if (ec) {
    fs::remove(tmp, ec);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.writes;
  }
  account(static_cast<int64_t>(bytes.size()) - (size_ec ? 0 : static_cast<int64_t>(replaced)));
  evict_to_fit();
}

void DiskCache::reject(const Fingerprint& key) {
  std::error_code ec;
  const auto size = fs::file_size(path_of(key), ec);
  if (!ec && fs::remove(path_of(key), ec)) account(-static_cast<int64_t>(size));
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.rejected;
}

void DiskCache::evict_to_fit() {
  if (bytes_on_disk() <= max_bytes_) return;
  // Over the bound as far as this process knows: look at what is really there.
  std::vector<EntryFile> items = scan(dir_);
  uint64_t total = 0;
  for (const EntryFile& e : items) total += e.size;
  std::sort(items.begin(), items.end(), [](const EntryFile& a, const EntryFile& b) { return a.time < b.time; });
  int64_t evicted = 0;
  std::error_code ec;
  for (const EntryFile& item : items) {
    if (total <= max_bytes_) break;
    if (fs::remove(item.path, ec)) {
      total -= item.size;
      ++evicted;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.evicted += evicted;
  tracked_bytes_ = static_cast<int64_t>(total);
}

void DiskCache::clear() {
  if (!enabled()) return;
  std::error_code ec;
  for (const EntryFile& e : scan(dir_)) fs::remove(e.path, ec);
  std::lock_guard<std::mutex> lock(mu_);
  tracked_bytes_ = -1;
}

uint64_t DiskCache::bytes_on_disk() const {
  if (!enabled()) return 0;
  account(0);
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<uint64_t>(tracked_bytes_);
}

DiskStats DiskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tpu::cache
