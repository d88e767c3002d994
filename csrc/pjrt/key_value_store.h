// The key-value store a plugin's client uses to find the other processes of a multi-process run:
// PJRT_Client_Create's kv_get / kv_try_get / kv_put callbacks (the XLA CUDA plugin exchanges its
// NCCL ids and topology through them; the XLA CPU plugin ignores them). torch_tpu backs it with
// torch.distributed's store (distributed/store_key_value.h).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "pjrt/c_api.h"

namespace tpu::pjrt {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // The value of `key`, waiting up to `timeout` for another process to put it; throws
  // std::runtime_error when it does not come.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // The value of `key` if present now.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  virtual void put(const std::string& key, const std::string& value) = 0;
};

// Points the client-creation arguments' key-value callbacks at `store` (which must outlive the
// client). Errors the store throws reach the plugin as PJRT errors carrying their message.
void connect_key_value_store(PJRT_Client_Create_Args& args, KeyValueStore* store);

}  // namespace tpu::pjrt
