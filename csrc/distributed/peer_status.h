// What became of a group's peers, for the message of a failed collective: ranks on this host
// whose process has ended, and ranks that reported an uncaught error (torch_tpu.distributed
// writes both facts to the world store: "tpu_dist/peer/<rank>" = "<host> <pid>" when a group is
// created, "tpu_dist/failed/<rank>" = the error when a rank dies of an exception).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>
#include <vector>

namespace tpu::distributed {

class PeerStatus {
 public:
  PeerStatus() = default;
  // `global_ranks`: the world rank of each group rank; `rank`: this rank in the group.
  PeerStatus(c10::intrusive_ptr<c10d::Store> store, std::vector<int64_t> global_ranks, int rank);

  // "rank 1 (pid 4242) has exited; rank 2 reported: ValueError: ..." or "" when nothing is known.
  // Looks for up to `patience_ms` (a peer that just failed may still be exiting).
  std::string diagnose(int patience_ms = 2000) const;

 private:
  std::string look() const;

  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<int64_t> global_ranks_;
  int rank_ = 0;
};

// True when process `pid` of this host has ended (gone, or a zombie).
bool process_ended(long pid);

}  // namespace tpu::distributed
