#include "pjrt/stderr_filter.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace tpu::pjrt {

namespace {

std::mutex& filter_mutex() {
  static std::mutex mu;
  return mu;
}

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<size_t>(n));
  }
}

std::string read_from_start(int fd) {
  std::string out;
  char buf[16384];
  off_t offset = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof(buf), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
    offset += n;
  }
}

constexpr std::string_view kAbslPreface = "WARNING: All log messages before absl::InitializeLog()";

}  // namespace

StderrFilter::StderrFilter(LineFilter drop) : lock_(filter_mutex()), drop_(drop) {
  std::fflush(stderr);
  capture_ = ::memfd_create("torch_tpu_stderr", MFD_CLOEXEC);
  if (capture_ < 0) return;
  saved_ = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (saved_ < 0 || ::dup2(capture_, STDERR_FILENO) < 0) {
    if (saved_ >= 0) ::close(saved_);
    ::close(capture_);
    saved_ = capture_ = -1;
  }
}

StderrFilter::~StderrFilter() {
  if (capture_ < 0) return;
  std::fflush(stderr);
  ::dup2(saved_, STDERR_FILENO);
  ::close(saved_);
  const std::string captured = read_from_start(capture_);
  ::close(capture_);
  write_all(STDERR_FILENO, filter_lines(captured, drop_));
}

std::string filter_lines(std::string_view text, LineFilter drop) {
  std::string out;
  std::string_view preface;  // held until the next line shows whether it goes too
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const size_t len = end == std::string_view::npos ? text.size() : end + 1;
    const std::string_view line = text.substr(0, len);
    text.remove_prefix(len);
    if (line.substr(0, kAbslPreface.size()) == kAbslPreface) {
      out += preface;
      preface = line;
      continue;
    }
    if (drop(line)) {
      preface = {};
      continue;
    }
    out += preface;
    preface = {};
    out += line;
  }
  out += preface;
  return out;
}

bool is_tuning_feature_false_alarm(std::string_view line) {
  constexpr std::string_view kWhere = "cpu_aot_loader";
  constexpr std::string_view kWhat = "Target machine feature +";
  if (line.find(kWhere) == std::string_view::npos) return false;
  const size_t at = line.find(kWhat);
  if (at == std::string_view::npos) return false;
  const std::string_view rest = line.substr(at + kWhat.size());
  const std::string_view feature = rest.substr(0, rest.find(' '));
  return feature == "prefer-no-gather" || feature == "prefer-no-scatter";
}

}  // namespace tpu::pjrt
