// Device buffers of host scalars (Python numbers, alphas, view offsets), cached by value so a
// training loop that passes the same learning rate every step transfers it once.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "exec/op_call.h"
#include "pjrt/buffer.h"
#include "pjrt/client.h"

namespace tpu::exec {

class ScalarCache {
 public:
  std::shared_ptr<pjrt::Buffer> get(const pjrt::Client& client, int device, const ScalarValue& v);
  void clear();

  static constexpr size_t kCapacity = 4096;

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<pjrt::Buffer>> buffers_;
};

}  // namespace tpu::exec
