#include "profiler/device_timeline.h"

#include <algorithm>
#include <map>

namespace tpu::profiler {

void place_on_devices(std::vector<ExecutionRecord>& runs) {
  // Per device, in completion order (the order the device ran them in): each starts once both it
  // was launched and the one before it finished.
  std::vector<ExecutionRecord*> order;
  order.reserve(runs.size());
  for (ExecutionRecord& r : runs) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(), [](const ExecutionRecord* a, const ExecutionRecord* b) {
    return a->device != b->device ? a->device < b->device : a->done_ns < b->done_ns;
  });
  std::map<int, int64_t> free_at;  // per device: when its previous execution completed
  for (ExecutionRecord* r : order) {
    auto it = free_at.find(r->device);
    const int64_t previous = it == free_at.end() ? r->launch_ns : it->second;
    r->start_ns = std::min(std::max(r->launch_ns, previous), r->done_ns);
    free_at[r->device] = r->done_ns;
  }
}

}  // namespace tpu::profiler
