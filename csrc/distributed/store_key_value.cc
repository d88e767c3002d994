#include "distributed/store_key_value.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <stdexcept>

namespace tpu::distributed {

StoreKeyValue::StoreKeyValue(c10::intrusive_ptr<c10d::Store> store)
    : store_(c10::make_intrusive<c10d::PrefixStore>("tpu_dist/pjrt/", std::move(store))) {}

std::string StoreKeyValue::get(const std::string& key, std::chrono::milliseconds timeout) {
  try {
    store_->wait({key}, timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error("the PJRT client waited " + std::to_string(timeout.count()) +
                             " ms for '" + key + "' from another process: " + e.what());
  }
  const std::vector<uint8_t> v = store_->get(key);
  return std::string(v.begin(), v.end());
}

std::optional<std::string> StoreKeyValue::try_get(const std::string& key) {
  if (!store_->check({key})) return std::nullopt;
  const std::vector<uint8_t> v = store_->get(key);
  return std::string(v.begin(), v.end());
}

void StoreKeyValue::put(const std::string& key, const std::string& value) {
  store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

}  // namespace tpu::distributed
