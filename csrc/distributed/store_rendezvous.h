// The rendezvous of ranks in different processes (runtime/rendezvous.h), through the process
// group's store: each rank puts its payload under "<round>/<rank>" and polls until every rank's
// is there; a rank that abandons the group puts why under "abandoned". The device transport meets
// this way when its ranks are processes - with a plugin whose collectives span processes (libtpu,
// the XLA CUDA plugin), so that a failing rank never leaves the others inside the plugin.
// TORCH_TPU_DIST_RENDEZVOUS=store makes ranks that are threads meet this way too (tests).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "runtime/rendezvous.h"

namespace tpu::distributed {

class StoreRendezvous : public runtime::Rendezvous {
 public:
  // `token` names the group (the same on all its ranks).
  StoreRendezvous(c10::intrusive_ptr<c10d::Store> store, const std::string& token, int size);

  int size() const override { return size_; }
  std::vector<std::string> meet(uint64_t round, int rank, std::string payload,
                                std::chrono::milliseconds timeout, const std::string& what) override;
  void abandon(int rank, const std::string& why) override;

 private:
  static std::string key(uint64_t round, int rank);
  std::string abandoned() const;  // "" when nobody abandoned the group

  c10::intrusive_ptr<c10d::Store> store_;
  const int size_;
};

}  // namespace tpu::distributed
