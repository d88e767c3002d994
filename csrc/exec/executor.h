// The Strict/Debug executor: each OpCall becomes one cached per-op executable that is enqueued
// on the device and returns at once. In Debug mode (TPU_LAUNCH_BLOCKING=1) it also waits for
// the op to finish, so a device error is raised by the op that caused it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/executable_cache.h"
#include "exec/op_call.h"
#include "exec/program_builder.h"
#include "exec/scalar_cache.h"
#include "hlo/tensor_type.h"
#include "pjrt/buffer.h"

namespace tpu::exec {

struct FreshOutput {
  std::shared_ptr<pjrt::Buffer> buffer;
  hlo::TensorType type;
};

struct ExecutorStats {
  int64_t executions = 0;        // programs enqueued
  int64_t signature_hits = 0;    // calls that found their program without building it
  int64_t signature_misses = 0;  // calls that built (and maybe compiled) a program
};

class Executor {
 public:
  static Executor& get();

  // Runs `call`. Outputs with a Target are written into their storages; the fresh ones are
  // returned in order.
  std::vector<FreshOutput> run(const OpCall& call);

  bool blocking() const { return blocking_.load(); }
  void set_blocking(bool on) { blocking_.store(on); }

  cache::ExecutableCache& executables() { return executables_; }
  ScalarCache& scalars() { return scalars_; }
  ExecutorStats stats() const;

 private:
  Executor();
  struct Program {
    ProgramPlan plan;
    std::shared_ptr<pjrt::LoadedExecutable> exe;
  };
  std::shared_ptr<const Program> program_for(const OpCall& call, const CallLayout& layout);
  void materialize(const OpCall& call, const std::vector<runtime::DeviceStorage*>& storages);

  std::atomic<bool> blocking_{false};
  cache::ExecutableCache executables_;
  ScalarCache scalars_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Program>> programs_;
  ExecutorStats stats_;
  std::string dump_dir_;
};

}  // namespace tpu::exec
