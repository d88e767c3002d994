#include "exec/captured_program.h"

#include <atomic>
#include <stdexcept>

#include "exec/executor.h"
#include "runtime/runtime.h"

namespace tpu::exec {

namespace {
std::atomic<int64_t> donated{0};
}  // namespace

int64_t donated_buffers() { return donated.load(std::memory_order_relaxed); }

std::vector<std::shared_ptr<pjrt::Buffer>> run_program(
    pjrt::LoadedExecutable& exe, int device, std::vector<std::shared_ptr<pjrt::Buffer>> params,
    std::vector<std::shared_ptr<pjrt::Buffer>> scalars, const std::vector<int>& donatable,
    const char* label) {
  runtime::Runtime& rt = runtime::Runtime::get();
  std::vector<PJRT_Buffer*> args;
  args.reserve(params.size() + scalars.size());
  for (const auto& p : params) args.push_back(p->raw());
  for (const auto& s : scalars) args.push_back(s->raw());
  std::vector<int64_t> non_donatable;
  for (int p : donatable) {
    if (params[p].use_count() > 2) non_donatable.push_back(p);
  }
  pjrt::LoadedExecutable::Result result;
  try {
    result = exe.execute(args, rt.device(device).raw, non_donatable);
  } catch (const std::exception& e) {
    throw std::runtime_error(runtime::device_error_message(label, e.what()));
  }
  Executor::get().count_execution();
  donated.fetch_add(static_cast<int64_t>(donatable.size() - non_donatable.size()), std::memory_order_relaxed);
  std::vector<std::shared_ptr<pjrt::Buffer>> outputs;
  outputs.reserve(result.outputs.size());
  for (auto& out : result.outputs) outputs.emplace_back(std::move(out));
  std::vector<std::shared_ptr<pjrt::Buffer>> keep = std::move(scalars);
  keep.insert(keep.end(), std::make_move_iterator(params.begin()), std::make_move_iterator(params.end()));
  keep.insert(keep.end(), outputs.begin(), outputs.end());
  rt.tracker(device).add(std::shared_ptr<pjrt::Event>(std::move(result.done)), label, std::move(keep));
  return outputs;
}

}  // namespace tpu::exec
