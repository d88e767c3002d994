#include "exec/compile_settings.h"

#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>

namespace tpu::exec {

namespace {

constexpr const char* kOptimizationLevel = "xla_optimization_level";
constexpr const char* kMemoryFittingLevel = "xla_memory_fitting_level";

// The options stack is process-wide (like the eager mode): ops autograd's engine runs on its own
// thread compile with the block of the thread that ran the forward. Each change bumps
// g_generation; a thread rebuilds its cached key when the generation moved.
std::mutex g_mu;
std::vector<std::vector<CompilerOption>> g_stack;
std::optional<bool> g_excess_precision;
std::atomic<int64_t> g_generation{0};

struct KeyCache {
  std::string key;
  int64_t generation = -1;
};
thread_local KeyCache t_key;

// "O0".."O3" -> ExecutionOptions.EffortLevel (O0 = 9, O1 = 19, O2 = 29, O3 = 39).
int64_t effort_level(const std::string& name, const pjrt::CompileOptions::Override& value) {
  const std::string* s = std::get_if<std::string>(&value);
  if (s != nullptr && s->size() == 2 && (*s)[0] == 'O' && (*s)[1] >= '0' && (*s)[1] <= '3') {
    return 9 + 10 * ((*s)[1] - '0');
  }
  throw std::invalid_argument("custom_compiler_options: " + name +
                              " must be one of 'O0', 'O1', 'O2', 'O3'");
}

std::string value_text(const pjrt::CompileOptions::Override& v) {
  if (auto* s = std::get_if<std::string>(&v)) return "s" + *s;
  if (auto* b = std::get_if<bool>(&v)) return *b ? "b1" : "b0";
  if (auto* i = std::get_if<int64_t>(&v)) return "i" + std::to_string(*i);
  return "d" + std::to_string(std::get<double>(v));
}

}  // namespace

void push_compiler_options(std::vector<CompilerOption> options) {
  for (const auto& [name, value] : options) {
    if (name == kOptimizationLevel || name == kMemoryFittingLevel) effort_level(name, value);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_stack.push_back(std::move(options));
  g_generation.fetch_add(1);
}

void pop_compiler_options() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_stack.empty()) g_stack.pop_back();
  g_generation.fetch_add(1);
}

std::vector<CompilerOption> current_compiler_options() {
  std::map<std::string, pjrt::CompileOptions::Override> merged;
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& level : g_stack) {
    for (const auto& [name, value] : level) merged[name] = value;
  }
  return {merged.begin(), merged.end()};
}

std::optional<bool> allow_excess_precision_setting() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_excess_precision;
}

void set_allow_excess_precision(bool allow) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_excess_precision = allow;
  g_generation.fetch_add(1);
}

const std::string& settings_key() {
  KeyCache& t = t_key;
  const int64_t generation = g_generation.load(std::memory_order_acquire);
  if (t.generation == generation) return t.key;
  t.key.clear();
  for (const auto& [name, value] : current_compiler_options()) t.key += name + '=' + value_text(value) + ';';
  if (auto excess = allow_excess_precision_setting()) t.key += *excess ? "excess=1;" : "excess=0;";
  t.generation = generation;
  return t.key;
}

void apply_compile_settings(pjrt::CompileOptions& options) {
  for (auto& [name, value] : current_compiler_options()) {
    if (name == kOptimizationLevel) {
      options.optimization_level = effort_level(name, value);
    } else if (name == kMemoryFittingLevel) {
      options.memory_fitting_level = effort_level(name, value);
    } else {
      options.env_option_overrides.emplace_back(std::move(name), std::move(value));
    }
  }
  if (auto excess = allow_excess_precision_setting()) {
    options.env_option_overrides.emplace_back("xla_allow_excess_precision", *excess);
  }
}

}  // namespace tpu::exec
