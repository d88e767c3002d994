#include "exec/executor.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "cache/fingerprint.h"
#include "exec/fused_graph.h"
#include "exec/replica_group.h"
#include "pjrt/compile_options.h"
#include "profiler/trace_hooks.h"
#include "runtime/launch_queue.h"
#include "runtime/runtime.h"

namespace tpu::exec {

namespace {

// Per-op programs kept (each holds its executable). Together with the memory tier of the
// executable cache this bounds the executables alive in the process: every one the XLA CPU
// plugin loads costs ~6 memory mappings, and a process that exceeds vm.max_map_count (65530)
// aborts inside LLVM.
constexpr size_t kMaxPrograms = 2048;

// Shape churn is counted per op and kind of call (input dtypes and ranks): an op used with many
// shapes of different ranks across a model is normal, one call pattern seeing many shapes is not.
std::string churn_group(const OpCall& call) {
  std::string g = call.label;
  g += " (";
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Input& in = call.inputs[i];
    if (i) g += ", ";
    g += in.kind == Input::Kind::kScalar ? std::string("scalar")
                                         : std::string(display_name(in.view.dtype)) + "[rank " +
                                               std::to_string(in.view.sizes.size()) + "]";
  }
  return g + ")";
}

std::string input_shapes(const OpCall& call) {
  std::string s;
  for (const Input& in : call.inputs) {
    if (!s.empty()) s += ", ";
    s += in.kind == Input::Kind::kScalar ? "scalar" : hlo::dims_str(in.view.sizes);
  }
  return s;
}

}  // namespace

Executor& Executor::get() {
  static Executor* executor = new Executor();
  return *executor;
}

Executor::Executor() : fused_(std::make_unique<FusedGraph>(*this)) {
  if (const char* d = std::getenv("TORCH_TPU_DUMP_HLO")) dump_dir_ = d;
}

ExecutorStats Executor::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Executor::clear_cache(bool disk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    programs_.clear();
  }
  fused_->clear_programs();
  executables_.clear(disk);
}

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

void Executor::count_execution() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.executions;
}

namespace {

// XLA options every program is compiled with so that it computes PyTorch's results. XLA's CPU and
// GPU compilers default to "fast" min/max, which return the other operand when one is NaN: with
// it, max/amax/clamp/maximum drop NaN where PyTorch propagates it. Turning it off keeps the one
// native instruction (measured: amax of 2048x2048 in the same time as with the fast form).
std::vector<std::pair<std::string, pjrt::CompileOptions::Override>> semantics_overrides(
    const std::string& platform) {
  if (platform == "cpu") return {{"xla_cpu_enable_fast_min_max", false}};
  if (platform == "cuda" || platform == "gpu" || platform == "rocm") {
    return {{"xla_gpu_enable_fast_min_max", false}};
  }
  return {};  // TPU: max and min propagate NaN natively
}

}  // namespace

std::shared_ptr<pjrt::LoadedExecutable> Executor::compile(const std::string& mlir,
                                                          const std::string& what,
                                                          const std::vector<int64_t>& replica_devices) {
  runtime::Runtime& rt = runtime::Runtime::get();
  pjrt::CompileOptions compile_options =
      replica_devices.empty() ? pjrt::CompileOptions{} : pjrt::replicated_over(replica_devices);
  compile_options.env_option_overrides = semantics_overrides(rt.client().platform_name());
  const std::string options = pjrt::serialize(compile_options);
  // The key: program text, compile options, plugin identity and version, device kind.
  const std::string description =
      mlir + '\0' + options + '\0' + rt.identity() + '\0' + rt.device(0).kind;
  // While profiling: which tier answered, and when (profiler/trace_hooks.h).
  const bool traced = profiler::tracing();
  const int64_t start_ns = traced ? profiler::now_ns() : 0;
  const char* source = nullptr;  // "compile" or "disk" when the memory tier missed
  auto exe = executables_.get_or_compile(
      description,
      [&] {
        source = "compile";
        if (!dump_dir_.empty()) {
          std::ofstream(dump_dir_ + "/" + cache::fingerprint(mlir).hex() + ".mlir") << mlir;
        }
        try {
          return rt.client().compile(mlir, options);
        } catch (const std::exception& first) {
          // XLA CPU's JIT occasionally fails to link a module it just built ("Failed to
          // materialize symbols"); a second compile of the same module succeeds.
          if (std::string(first.what()).find("materialize symbols") != std::string::npos) {
            try {
              return rt.client().compile(mlir, options);
            } catch (const std::exception&) {
            }
          }
          throw std::runtime_error("torch_tpu could not compile " + what + ": " + first.what());
        }
      },
      [&](const std::string& bytes) {
        source = "disk";
        return rt.client().deserialize(bytes);
      });
  if (traced) {
    if (source == nullptr) {
      profiler::sink().cache_hit(what, "memory");
    } else if (source[0] == 'd') {
      profiler::sink().cache_hit(what, "disk");
    } else {
      profiler::sink().compile(what, source, start_ns, profiler::now_ns());
    }
  }
  return exe;
}

std::shared_ptr<const OpProgram> Executor::program_for(const OpCall& call, const CallLayout& layout,
                                                       const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(key);
    if (it != programs_.end()) {
      ++stats_.signature_hits;
      if (profiler::tracing()) profiler::sink().cache_hit(call.label, "program");
      return it->second;
    }
    ++stats_.signature_misses;
  }
  // `key` may be the caller's reused per-thread buffer: keep our own copy before anything
  // below (building, warnings) could reach another op.
  const std::string own_key = key;
  BuiltProgram built = build_program(call, layout);
  auto program = std::make_shared<OpProgram>();
  program->plan = std::move(built.plan);
  program->mlir = std::move(built.mlir);
  program->label = call.label;
  if (call.group != nullptr) program->replica_devices = call.group->devices();
  churn_.note_compile(churn_group(call), input_shapes(call));
  std::lock_guard<std::mutex> lock(mu_);
  if (programs_.size() >= kMaxPrograms) programs_.clear();
  programs_.emplace(own_key, program);
  return program;
}

std::shared_ptr<pjrt::LoadedExecutable> Executor::executable_of(const OpProgram& program) {
  std::lock_guard<std::mutex> lock(program.mu);
  if (program.exe == nullptr) {
    program.exe = compile(program.mlir, program.label, program.replica_devices);
    std::string().swap(const_cast<OpProgram&>(program).mlir);  // not needed any more
  }
  return program.exe;
}

void Executor::assign(runtime::DeviceStorage& storage, FreshOutput out, const char* writer) {
  if (out.buffer == nullptr && out.pending >= 0) {
    fused_->bind(&storage, out.pending);
  } else {
    storage.set_contents(std::move(out.buffer), out.type, writer);
  }
}

void Executor::materialize(const OpCall& call, const std::vector<runtime::DeviceStorage*>& storages) {
  for (runtime::DeviceStorage* s : storages) {
    // Fill with zeros in the dtype of the first view that refers to the storage.
    ElementType dtype = ElementType::kU8;
    for (const Input& in : call.inputs) {
      if (in.kind == Input::Kind::kTensor && in.storage == s) { dtype = in.view.dtype; break; }
    }
    if (dtype == ElementType::kU8) {
      for (const auto& out : call.outputs) {
        if (out && out->storage == s) { dtype = out->view.dtype; break; }
      }
    }
    const size_t nbytes = s->nbytes();
    if (nbytes % element_size(dtype) != 0) dtype = ElementType::kU8;
    OpCall fill;
    fill.op = "full";
    fill.label = "zero-fill of an uninitialised storage";
    fill.attrs.set_ints("shape", {static_cast<int64_t>(nbytes / element_size(dtype))});
    fill.inputs.push_back(Input::of_scalar(ScalarValue::integral(dtype, 0)));
    fill.outputs.push_back(std::nullopt);
    fill.device = s->device();
    auto result = run(fill);
    assign(*s, std::move(result[0]), fill.label);
  }
}

std::vector<FreshOutput> Executor::run(OpCall&& call) {
  if (eager_mode() == EagerMode::kFused && call.group == nullptr) return fused_->record(std::move(call));
  return run(static_cast<const OpCall&>(call));
}

std::vector<FreshOutput> Executor::run(const OpCall& call) {
  const EagerMode mode = eager_mode();
  if (mode == EagerMode::kFused && call.group == nullptr) return fused_->record(call);

  runtime::Runtime& rt = runtime::Runtime::get();
  CallLayout layout = layout_of(call);
  auto missing = unmaterialized(layout);
  if (!missing.empty()) {
    materialize(call, missing);
    layout = layout_of(call);
  }
  thread_local std::string key;  // reused: no allocation per op
  signature_into(call, layout, key);
  std::shared_ptr<const OpProgram> program = program_for(call, layout, key);
  std::shared_ptr<pjrt::LoadedExecutable> exe = executable_of(*program);
  const ProgramPlan& plan = program->plan;

  // The argument buffers, owned here until the execution has finished.
  std::vector<std::shared_ptr<pjrt::Buffer>> owners;
  owners.reserve(plan.args.size() + plan.output_types.size());
  for (const auto& arg : plan.args) {
    if (arg.kind == ProgramPlan::Arg::Kind::kSlot) {
      owners.push_back(layout.slots[arg.index].contents.buffer);
    } else {
      owners.push_back(scalars_.get(rt.client(), call.device, runtime_value(call, arg)));
    }
  }
  // A buffer can be donated only when the storage and this call hold the sole references.
  std::vector<int64_t> non_donatable;
  for (int slot : plan.donatable_args) {
    if (layout.slots[slot].contents.buffer.use_count() > 3) non_donatable.push_back(slot);
  }
  if (record_last_.load(std::memory_order_relaxed) && plan.donatable_args.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = LastRun{exe, owners, call.device};
  }
  layout.slots.clear();  // the launch holds the sole extra references now

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
  count_execution();
  if (mode == EagerMode::kDebug) rt.tracker(call.device).synchronize();
  return fresh;
}

}  // namespace tpu::exec
