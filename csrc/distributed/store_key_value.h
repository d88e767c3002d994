// torch.distributed's store as the key-value store a plugin's client uses to find the other
// processes of a multi-process run (pjrt/key_value_store.h): the client of each process is
// created knowing its peers through the same rendezvous store as the process group.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "pjrt/key_value_store.h"

namespace tpu::distributed {

class StoreKeyValue : public pjrt::KeyValueStore {
 public:
  explicit StoreKeyValue(c10::intrusive_ptr<c10d::Store> store);
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  void put(const std::string& key, const std::string& value) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace tpu::distributed
