#include "distributed/peer_status.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace tpu::distributed {

namespace {

std::string hostname() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string as_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

}  // namespace

bool process_ended(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  // "<pid> (<comm>) <state> ...": the state follows the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

PeerStatus::PeerStatus(c10::intrusive_ptr<c10d::Store> store, std::vector<int64_t> global_ranks, int rank)
    : store_(std::move(store)), global_ranks_(std::move(global_ranks)), rank_(rank) {}

std::string PeerStatus::look() const {
  std::string found;
  const std::string host = hostname();
  for (size_t r = 0; r < global_ranks_.size(); ++r) {
    if (static_cast<int>(r) == rank_) continue;
    const std::string g = std::to_string(global_ranks_[r]);
    const std::string failed_key = "tpu_dist/failed/" + g;
    const std::string peer_key = "tpu_dist/peer/" + g;
    std::string note;
    if (store_->check({failed_key})) {
      note = "rank " + std::to_string(r) + " reported: " + as_string(store_->get(failed_key));
    } else if (store_->check({peer_key})) {
      std::istringstream in(as_string(store_->get(peer_key)));
      std::string peer_host;
      long pid = 0;
      in >> peer_host >> pid;
      if (peer_host == host && pid > 0 && process_ended(pid)) {
        note = "rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") has exited";
      }
    }
    if (!note.empty()) found += (found.empty() ? "" : "; ") + note;
  }
  return found;
}

std::string PeerStatus::diagnose(int patience_ms) const {
  if (store_ == nullptr) return "";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(patience_ms);
  try {
    for (;;) {
      std::string found = look();
      if (!found.empty() || std::chrono::steady_clock::now() >= deadline) return found;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } catch (const std::exception&) {
    // The store lives in one rank's process (or the launcher): gone with it.
    return "the rendezvous store is unreachable (the rank or launcher hosting it has exited)";
  }
}

}  // namespace tpu::distributed
