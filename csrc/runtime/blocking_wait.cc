#include "runtime/blocking_wait.h"

#include <atomic>

namespace tpu::runtime {
namespace {
std::atomic<void* (*)()> g_begin{nullptr};
std::atomic<void (*)(void*)> g_end{nullptr};
}  // namespace

void set_blocking_wait_hooks(BlockingWaitHooks hooks) {
  g_end.store(hooks.end);
  g_begin.store(hooks.begin);
}

BlockingWait::BlockingWait() {
  auto begin = g_begin.load();
  token_ = begin != nullptr ? begin() : nullptr;
}

BlockingWait::~BlockingWait() {
  if (token_ == nullptr) return;
  if (auto end = g_end.load()) end(token_);
}

}  // namespace tpu::runtime
