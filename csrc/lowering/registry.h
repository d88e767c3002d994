// The one table of op lowerings: aten op (or op family) name -> function that emits its
// StableHLO. Strict Eager, Fused Eager and torch.compile all build their modules from it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hlo/builder.h"
#include "lowering/attrs.h"

namespace tpu::lowering {

struct Context {
  hlo::Builder& b;
  const Attrs& attrs;
};

// Inputs arrive already converted to the op's compute dtype (see exec/op_call.h); shapes are
// not broadcast - elementwise lowerings call broadcast helpers themselves.
using LowerFn = std::function<std::vector<hlo::Value>(Context& ctx, const std::vector<hlo::Value>& inputs)>;

void register_lowering(const char* name, LowerFn fn);

// A family's lowerings as a table (see TPU_REGISTER_LOWERINGS).
struct LoweringEntry {
  const char* name;
  LowerFn fn;
};
bool register_lowerings(const LoweringEntry* entries, size_t count);
// nullptr when no lowering is registered under `name`.
const LowerFn* find_lowering(const std::string& name);
std::vector<std::string> registered_lowerings();

}  // namespace tpu::lowering

#define TPU_LOWERING_CONCAT_(a, b) a##b
#define TPU_LOWERING_CONCAT(a, b) TPU_LOWERING_CONCAT_(a, b)
// Registers `fn` under `name` at static-initialisation time.
#define TPU_REGISTER_LOWERING(name, fn)                                                   \
  static const bool TPU_LOWERING_CONCAT(tpu_lowering_registered_, __COUNTER__) =          \
      (::tpu::lowering::register_lowering(name, fn), true)
// Registers every entry of the array `table` at static-initialisation time.
#define TPU_REGISTER_LOWERINGS(table)                                                     \
  static const bool TPU_LOWERING_CONCAT(tpu_lowerings_registered_, __COUNTER__) =         \
      ::tpu::lowering::register_lowerings(table, sizeof(table) / sizeof((table)[0]))
