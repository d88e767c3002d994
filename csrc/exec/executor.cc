#include "exec/executor.h"

#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "cache/fingerprint.h"
#include "pjrt/compile_options.h"
#include "runtime/runtime.h"

namespace tpu::exec {

namespace {
constexpr size_t kMaxPrograms = 16384;

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}
}  // namespace

Executor& Executor::get() {
  static Executor* executor = new Executor();
  return *executor;
}

Executor::Executor() {
  blocking_ = env_flag("TPU_LAUNCH_BLOCKING");
  if (const char* d = std::getenv("TORCH_TPU_DUMP_HLO")) dump_dir_ = d;
}

ExecutorStats Executor::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::shared_ptr<const Executor::Program> Executor::program_for(const OpCall& call,
                                                               const CallLayout& layout) {
  const std::string key = signature(call, layout);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(key);
    if (it != programs_.end()) {
      ++stats_.signature_hits;
      return it->second;
    }
    ++stats_.signature_misses;
  }
  BuiltProgram built = build_program(call, layout);
  runtime::Runtime& rt = runtime::Runtime::get();
  const std::string options = pjrt::serialize(pjrt::CompileOptions{});
  const std::string description = built.mlir + '\0' + options + '\0' + rt.identity();
  auto program = std::make_shared<Program>();
  program->plan = std::move(built.plan);
  program->exe = executables_.get_or_compile(description, [&] {
    if (!dump_dir_.empty()) {
      std::ofstream(dump_dir_ + "/" + cache::fingerprint(built.mlir).hex() + ".mlir") << built.mlir;
    }
    try {
      return rt.client().compile(built.mlir, options);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("torch_tpu could not compile ") + call.label + ": " +
                               e.what());
    }
  });
  std::lock_guard<std::mutex> lock(mu_);
  if (programs_.size() >= kMaxPrograms) programs_.clear();
  programs_.emplace(key, program);
  return program;
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
    s->set_contents(std::move(result[0].buffer), result[0].type, fill.label);
  }
}

std::vector<FreshOutput> Executor::run(const OpCall& call) {
  runtime::Runtime& rt = runtime::Runtime::get();
  CallLayout layout = layout_of(call);
  auto missing = unmaterialized(layout);
  if (!missing.empty()) {
    materialize(call, missing);
    layout = layout_of(call);
  }
  std::shared_ptr<const Program> program = program_for(call, layout);
  const ProgramPlan& plan = program->plan;

  std::vector<std::shared_ptr<pjrt::Buffer>> scalars;
  std::vector<PJRT_Buffer*> args;
  args.reserve(plan.args.size());
  for (const auto& arg : plan.args) {
    switch (arg.kind) {
      case ProgramPlan::Arg::Kind::kSlot:
        args.push_back(layout.slots[arg.index].contents.buffer->raw());
        break;
      case ProgramPlan::Arg::Kind::kInputOffset:
        scalars.push_back(scalars_.get(rt.client(), call.device,
                                       ScalarValue::integral(ElementType::kI64, call.inputs[arg.index].view.offset)));
        args.push_back(scalars.back()->raw());
        break;
      case ProgramPlan::Arg::Kind::kOutputOffset:
        scalars.push_back(scalars_.get(rt.client(), call.device,
                                       ScalarValue::integral(ElementType::kI64, call.outputs[arg.index]->view.offset)));
        args.push_back(scalars.back()->raw());
        break;
      case ProgramPlan::Arg::Kind::kScalar:
        scalars.push_back(scalars_.get(rt.client(), call.device, call.inputs[arg.index].scalar));
        args.push_back(scalars.back()->raw());
        break;
    }
  }
  // A buffer can be donated only when the storage and this call hold the sole references.
  std::vector<int64_t> non_donatable;
  for (int slot : plan.donatable_args) {
    if (layout.slots[slot].contents.buffer.use_count() > 2) non_donatable.push_back(slot);
  }

  pjrt::LoadedExecutable::Result result;
  try {
    result = program->exe->execute(args, rt.device(call.device).raw, non_donatable);
  } catch (const std::exception& e) {
    throw std::runtime_error(runtime::device_error_message(call.label, e.what()));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.executions;
  }
  std::vector<FreshOutput> fresh;
  for (size_t i = 0; i < result.outputs.size(); ++i) {
    std::shared_ptr<pjrt::Buffer> buffer(std::move(result.outputs[i]));
    if (call.outputs[i]) {
      call.outputs[i]->storage->set_contents(std::move(buffer), plan.output_types[i], call.label);
    } else {
      fresh.push_back(FreshOutput{std::move(buffer), plan.output_types[i]});
    }
  }
  runtime::WorkTracker& tracker = rt.tracker(call.device);
  tracker.add(std::shared_ptr<pjrt::Event>(std::move(result.done)), call.label);
  if (blocking_) tracker.synchronize();
  return fresh;
}

}  // namespace tpu::exec
