// The "custom_kernel" lowering: a func.call of a registered kernel function.
//
// attrs: kernel (the entry symbol), out_dtypes (ElementType per output), out_ranks (rank per
// output) and out_dims (all output dims, concatenated). Inputs arrive in their own dtypes (the
// kernel's signature fixes them; nothing is promoted).
#include "lowering/custom_kernel.h"

#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

struct Kernel {
  std::string text;
  std::string label;
};

std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}
// Nodes of an unordered_map are stable: labels handed out stay valid.
std::unordered_map<std::string, Kernel>& registry() {
  static auto* kernels = new std::unordered_map<std::string, Kernel>();
  return *kernels;
}

std::vector<hlo::Value> lower_custom_kernel(Context& ctx, const std::vector<hlo::Value>& inputs) {
  const std::string& symbol = ctx.attrs.get_string("kernel");
  std::string text;
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    auto it = registry().find(symbol);
    if (it == registry().end()) throw std::invalid_argument("custom kernel @" + symbol + " is not registered");
    text = it->second.text;
  }
  const hlo::Dims& dtypes = ctx.attrs.get_ints("out_dtypes");
  const hlo::Dims& ranks = ctx.attrs.get_ints("out_ranks");
  const hlo::Dims& dims = ctx.attrs.get_ints("out_dims");
  if (dtypes.size() != ranks.size()) throw std::invalid_argument("custom kernel: out_dtypes and out_ranks differ in length");
  std::vector<hlo::TensorType> results;
  size_t at = 0;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    hlo::TensorType t;
    t.dtype = static_cast<ElementType>(dtypes[i]);
    if (at + ranks[i] > dims.size()) throw std::invalid_argument("custom kernel: out_dims too short");
    t.dims.assign(dims.begin() + at, dims.begin() + at + ranks[i]);
    at += ranks[i];
    results.push_back(std::move(t));
  }
  ctx.b.add_function(symbol, text);
  return ctx.b.emit_multi("func.call", inputs, results, "callee = @" + symbol);
}

TPU_REGISTER_LOWERING("custom_kernel", lower_custom_kernel);

}  // namespace

const char* register_custom_kernel(const std::string& symbol, const std::string& text,
                                   const std::string& label) {
  std::lock_guard<std::mutex> lock(registry_mu());
  auto it = registry().emplace(symbol, Kernel{text, label}).first;
  return it->second.label.c_str();
}

const char* custom_kernel_label(const std::string& symbol) {
  std::lock_guard<std::mutex> lock(registry_mu());
  auto it = registry().find(symbol);
  return it == registry().end() ? nullptr : it->second.label.c_str();
}

}  // namespace tpu::lowering
