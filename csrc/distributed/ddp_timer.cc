// DDP's per-iteration time statistics (forward, backward compute, communication) on tpu: the host
// times at which DDP reached each point - the device runs behind the host, so these are dispatch
// times, as for CPU tensors. Without a timer for the device, DDP warns on every run.
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace tpu::distributed {
namespace {

class TpuTimer final : public c10d::Timer {
 public:
  explicit TpuTimer(c10::Device /*device*/) {}

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const auto s = getTimestamp(start);
    const auto e = getTimestamp(end);
    if (!s || !e || *e < *s) return std::nullopt;
    return *e - *s;
  }
};

}  // namespace
}  // namespace tpu::distributed

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, tpu::distributed::TpuTimer);
}  // namespace c10d
