#include "exec/program_cache.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "exec/compile_settings.h"
#include "exec/replica_group.h"
#include "pjrt/compile_options.h"
#include "profiler/trace_hooks.h"
#include "runtime/runtime.h"

namespace tpu::exec {

namespace {

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

ProgramCache& ProgramCache::get() {
  // Per-op programs kept (each holds its executable). Together with the memory tier of the
  // executable cache this bounds the executables alive in the process: every one the XLA CPU
  // plugin loads costs ~6 memory mappings, and a process that exceeds vm.max_map_count (65530)
  // aborts inside LLVM.
  // TORCH_TPU_CACHE_MEMORY_ENTRIES=N (default 2048) bounds each of them at N (graph programs at
  // min(N, 256)).
  static ProgramCache* cache = [] {
    size_t entries = 2048;
    if (const char* v = std::getenv("TORCH_TPU_CACHE_MEMORY_ENTRIES"); v && *v) {
      char* end = nullptr;
      const long long n = std::strtoll(v, &end, 10);
      if (*end != '\0' || n <= 0) {
        throw std::runtime_error(std::string("TORCH_TPU_CACHE_MEMORY_ENTRIES='") + v +
                                 "' is not a positive count. Fix: set an integer such as 512, or unset it "
                                 "(default 2048).");
      }
      entries = static_cast<size_t>(n);
    }
    return new ProgramCache(
        [] {
          runtime::Runtime& rt = runtime::Runtime::get();
          return CompileTarget{&rt.client(), rt.identity() + '\0' + rt.device(0).kind};
        },
        entries, std::min<size_t>(entries, 256));
  }();
  return *cache;
}

ProgramCache::ProgramCache(TargetSource target, size_t max_op_programs, size_t max_graph_programs)
    : target_source_(std::move(target)),
      max_op_programs_(max_op_programs),
      max_graph_programs_(max_graph_programs),
      executables_(max_op_programs) {
  if (const char* d = std::getenv("TORCH_TPU_DUMP_HLO")) dump_dir_ = d;
}

const CompileTarget& ProgramCache::target() {
  // A failure (no plugin) is thrown to this caller and retried by the next one.
  std::call_once(target_once_, [this] { target_ = target_source_(); });
  return target_;
}

ProgramCacheStats ProgramCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ProgramCacheStats s;
  s.signature_hits = signature_hits_;
  s.signature_misses = signature_misses_;
  s.executions = executions_.load(std::memory_order_relaxed);
  s.donated_buffers = donated_.load(std::memory_order_relaxed);
  return s;
}

void ProgramCache::clear(bool disk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    op_programs_.clear();
    graph_programs_.clear();
  }
  executables_.clear(disk);
}

std::shared_ptr<pjrt::Buffer> ProgramCache::scalar(int device, const ScalarValue& v) {
  return scalars_.get(*target().client, device, v);
}

std::shared_ptr<const OpProgram> ProgramCache::op_program(const OpCall& call, const CallLayout& layout,
                                                          const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = op_programs_.find(key);
    if (it != op_programs_.end()) {
      ++signature_hits_;
      if (profiler::tracing()) profiler::sink().cache_hit(call.label, "program");
      return it->second;
    }
    ++signature_misses_;
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
  if (op_programs_.size() >= max_op_programs_) op_programs_.clear();
  op_programs_.emplace(own_key, program);
  return program;
}

std::shared_ptr<pjrt::LoadedExecutable> ProgramCache::executable_of(const OpProgram& program) {
  std::lock_guard<std::mutex> lock(program.mu);
  if (program.exe == nullptr) {
    program.exe = compile(program.mlir, program.label, program.replica_devices);
    std::string().swap(const_cast<OpProgram&>(program).mlir);  // not needed any more
  }
  return program.exe;
}

std::shared_ptr<const GraphProgram> ProgramCache::find_graph(const cache::Fingerprint& fp) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = graph_programs_.find(fp);
  return it == graph_programs_.end() ? nullptr : it->second;
}

void ProgramCache::add_graph(const cache::Fingerprint& fp, std::shared_ptr<const GraphProgram> program) {
  std::lock_guard<std::mutex> lock(mu_);
  // Graph programs kept (each holds its executable; see get() for why the count is bounded).
  if (graph_programs_.size() >= max_graph_programs_) graph_programs_.clear();
  graph_programs_[fp] = std::move(program);
}

pjrt::CompileOptions ProgramCache::compile_options(const std::vector<int64_t>& replica_devices) {
  const pjrt::Client& client = *target().client;
  pjrt::CompileOptions compile_options =
      replica_devices.empty() ? pjrt::CompileOptions{} : pjrt::replicated_over(replica_devices);
  compile_options.env_option_overrides = semantics_overrides(client.platform_name());
  apply_compile_settings(compile_options);  // torch.tpu.compiler.custom_compiler_options & co.
  return compile_options;
}

std::shared_ptr<pjrt::LoadedExecutable> ProgramCache::compile(const std::string& mlir,
                                                              const std::string& what,
                                                              const std::vector<int64_t>& replica_devices) {
  return compile(mlir, what, compile_options(replica_devices));
}

std::shared_ptr<pjrt::LoadedExecutable> ProgramCache::compile(const std::string& mlir,
                                                              const std::string& what,
                                                              const pjrt::CompileOptions& compile_options) {
  const CompileTarget& t = target();
  const pjrt::Client& client = *t.client;
  const std::string options = pjrt::serialize(compile_options);
  // The key: program text, compile options, plugin identity and version, device kind.
  const std::string description = mlir + '\0' + options + '\0' + t.identity;
  // While profiling: which tier answered, and when (profiler/trace_hooks.h).
  const bool traced = profiler::tracing();
  const int64_t start_ns = traced ? profiler::now_ns() : 0;
  const char* source = nullptr;  // "compile" or "disk" when the memory tier missed
  // Named by its text's fingerprint (the dump's file name) before anyone shares it.
  auto named = [&mlir](std::unique_ptr<pjrt::LoadedExecutable> exe) {
    exe->set_name(cache::fingerprint(mlir).hex());
    return exe;
  };
  auto exe = executables_.get_or_compile(
      description,
      [&] {
        source = "compile";
        try {
          return named(client.compile(mlir, options));
        } catch (const std::exception& first) {
          // XLA CPU's JIT occasionally fails to link a module it just built ("Failed to
          // materialize symbols"); a second compile of the same module succeeds.
          if (std::string(first.what()).find("materialize symbols") != std::string::npos) {
            try {
              return named(client.compile(mlir, options));
            } catch (const std::exception&) {
            }
          }
          throw std::runtime_error("torch_tpu could not compile " + what + ": " + first.what());
        }
      },
      [&](const std::string& bytes) {
        source = "disk";
        return named(client.deserialize(bytes));
      });
  // TORCH_TPU_DUMP_HLO: every program this process loads, compiled or from disk, once.
  if (source != nullptr && !dump_dir_.empty()) std::ofstream(dump_dir_ + "/" + exe->name() + ".mlir") << mlir;
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

}  // namespace tpu::exec
