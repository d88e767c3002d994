// What a user set about how programs are compiled, beyond the program text:
//   - compiler options (torch.tpu.compiler.custom_compiler_options): a process-wide stack of XLA
//     option overrides (autograd's engine thread compiles with the caller's block); the inner
//     entry of a name wins. Two names are not XLA flags but build
//     options: xla_optimization_level and xla_memory_fitting_level ("O0" .. "O3").
//   - allow_excess_precision (torch.tpu.allow_excess_precision): process-wide; unset means the
//     plugin's default (or --xla_allow_excess_precision in XLA_FLAGS).
// Every program compiled while a setting is active is compiled with it (ProgramCache::compile),
// and settings_key() is part of every per-op signature and fused-graph key, so programs built
// under different settings never share a cache entry.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pjrt/compile_options.h"

namespace tpu::exec {

using CompilerOption = std::pair<std::string, pjrt::CompileOptions::Override>;

// Throws std::invalid_argument for a malformed special option (an unknown effort level).
void push_compiler_options(std::vector<CompilerOption> options);
void pop_compiler_options();
// The merged options (inner wins), in name order.
std::vector<CompilerOption> current_compiler_options();

std::optional<bool> allow_excess_precision_setting();
void set_allow_excess_precision(bool allow);

// Empty when nothing is set (the default programs and their keys are unchanged).
const std::string& settings_key();

// Writes the settings into `options` (after the semantics overrides it already has).
void apply_compile_settings(pjrt::CompileOptions& options);

}  // namespace tpu::exec
