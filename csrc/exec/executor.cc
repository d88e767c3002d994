#include "exec/executor.h"

#include <chrono>
#include <stdexcept>

#include "exec/fused_graphs.h"
#include "exec/replica_group.h"
#include "exec/zero_fill.h"
#include "profiler/trace_hooks.h"
#include "runtime/launch_queue.h"
#include "runtime/runtime.h"

namespace tpu::exec {

Executor& Executor::get() {
  static Executor* executor = new Executor();
  return *executor;
}

Executor::Executor() : programs_(ProgramCache::get()), fused_(std::make_unique<FusedGraphs>()) {}

double Executor::replay_last_raw(int iterations) {
  LastRun last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = last_;
  }
  if (last.exe == nullptr) throw std::runtime_error("no per-op program has run yet");
  runtime::Runtime& rt = runtime::Runtime::get();
  std::vector<PJRT_Buffer*> args;
  for (const auto& b : last.args) args.push_back(b->raw());
  PJRT_Device* device = rt.device(last.device).raw;
  const std::vector<int64_t> none;
  std::vector<pjrt::LoadedExecutable::Result> in_flight;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    in_flight.push_back(last.exe->execute(args, device, none));
    if (in_flight.size() >= 256) {
      for (auto& r : in_flight) r.done->await();
      in_flight.clear();
    }
  }
  for (auto& r : in_flight) r.done->await();
  in_flight.clear();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Executor::assign(runtime::DeviceStorage& storage, FreshOutput out, const char* writer) {
  if (out.buffer == nullptr && out.pending >= 0) {
    fused_->of(storage.device()).bind(&storage, out.pending);
  } else {
    storage.set_contents(std::move(out.buffer), out.type, writer);
  }
}

void Executor::materialize(const OpCall& call, const std::vector<runtime::DeviceStorage*>& storages) {
  for (runtime::DeviceStorage* s : storages) {
    OpCall fill = zero_fill_call(call, *s);
    auto result = run(fill);
    assign(*s, std::move(result[0]), fill.label);
  }
}

namespace {

bool records(EagerMode mode, const OpCall& call) {
  if (mode != EagerMode::kFused) return false;
  return call.group == nullptr || FusedGraphs::records_collectives(call.device);
}

}  // namespace

std::vector<FreshOutput> Executor::run(OpCall&& call) {
  const EagerMode mode = eager_mode();
  if (records(mode, call) && !fused_->diverts(call)) {
    profiler::HostSpan span("record");
    return fused_->record(std::move(call));
  }
  return launch(call, mode);
}

std::vector<FreshOutput> Executor::run(const OpCall& call) {
  const EagerMode mode = eager_mode();
  if (records(mode, call) && !fused_->diverts(call)) {
    profiler::HostSpan span("record");
    return fused_->record(call);
  }
  return launch(call, mode);
}

std::vector<FreshOutput> Executor::launch(const OpCall& call, EagerMode mode) {
  profiler::HostSpan span("executor");

  runtime::Runtime& rt = runtime::Runtime::get();
  CallLayout layout = layout_of(call);
  auto missing = unmaterialized(layout);
  if (!missing.empty()) {
    materialize(call, missing);
    layout = layout_of(call);
  }
  thread_local std::string key;  // reused: no allocation per op
  signature_into(call, layout, key);
  std::shared_ptr<const OpProgram> program = programs_.op_program(call, layout, key);
  std::shared_ptr<pjrt::LoadedExecutable> exe = programs_.executable_of(*program);
  const ProgramPlan& plan = program->plan;

  // The argument buffers, owned here until the execution has finished.
  std::vector<std::shared_ptr<pjrt::Buffer>> owners;
  owners.reserve(plan.args.size() + plan.output_types.size());
  for (const auto& arg : plan.args) {
    if (arg.kind == ProgramPlan::Arg::Kind::kSlot) {
      owners.push_back(layout.slots[arg.index].contents.buffer);
    } else {
      owners.push_back(programs_.scalar(call.device, runtime_value(call, arg)));
    }
  }
  // A buffer can be donated only when the storage and this call hold the sole references - apart
  // from the tracker's while the program before still produces it (back-to-back in-place ops and
  // collectives take over the buffer the previous one is writing; PJRT orders the two).
  std::vector<int64_t> non_donatable;
  for (int slot : plan.donatable_args) {
    if (!pjrt::donatable(layout.slots[slot].contents.buffer, 3)) non_donatable.push_back(slot);
  }
  if (record_last_.load(std::memory_order_relaxed) && plan.donatable_args.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = LastRun{exe, owners, call.device};
  }
  layout.slots.clear();  // the launch holds the sole extra references now
  const auto donated = static_cast<int64_t>(plan.donatable_args.size() - non_donatable.size());

  // The outputs are promised now and produced by the launch (runtime/launch_queue.h).
  runtime::Launch launch;
  launch.exe = std::move(exe);
  launch.num_args = owners.size();
  launch.buffers = std::move(owners);  // has room for the outputs
  launch.non_donatable = std::move(non_donatable);
  launch.device = call.device;
  launch.label = call.label;
  if (profiler::tracing()) launch.correlation = profiler::sink().current_correlation();
  std::vector<FreshOutput> fresh;
  fresh.reserve(plan.output_types.size());
  const PJRT_Api* api = rt.client().api();
  for (size_t i = 0; i < plan.output_types.size(); ++i) {
    auto buffer = std::make_shared<pjrt::Buffer>(api);
    launch.buffers.push_back(buffer);
    if (call.outputs[i]) {
      call.outputs[i]->storage->set_contents(std::move(buffer), plan.output_types[i], call.label);
    } else {
      fresh.push_back(FreshOutput{std::move(buffer), plan.output_types[i]});
    }
  }
  if (call.group != nullptr) {
    call.group->launch(std::move(launch));
  } else {
    runtime::LaunchQueue::get().push(std::move(launch));
  }
  programs_.count_execution(donated);
  if (mode == EagerMode::kDebug) rt.tracker(call.device).synchronize();
  return fresh;
}

}  // namespace tpu::exec
