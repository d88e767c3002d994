// Turns one OpCall into a StableHLO program: parameters for the storages it touches, view
// reads (lowering/view_access), dtype conversion, the op's lowering from the registry, and
// writes of outputs into target views. Also computes the call's signature - the cache key -
// without building anything.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/inline_vector.h"
#include "exec/op_call.h"
#include "hlo/builder.h"
#include "hlo/tensor_type.h"
#include "runtime/device_storage.h"

namespace tpu::exec {

// The distinct storages of a call and how each input/output refers to them.
struct CallLayout {
  struct Slot {
    runtime::DeviceStorage* storage = nullptr;
    runtime::DeviceStorage::Contents contents;  // contents.type is what the program reads
    bool present = false;                       // false: never written (reads as zeros)
  };
  std::vector<Slot> slots;
  // Per input and per output (inline: an op has few, and every op builds a layout).
  common::InlineVector<int, 6> input_slot;        // per input; -1 for scalars
  common::InlineVector<bool, 6> input_identity;   // the view is the whole buffer as it is laid out
  common::InlineVector<int, 4> output_slot;       // per output; -1 when fresh or written whole
  common::InlineVector<bool, 4> output_whole;     // target view covers its whole storage contiguously
};

// Slots and identity flags of `call` given the storages' current contents.
CallLayout layout_of(const OpCall& call);
// The same, with each storage's slot (contents and presence) given by `slot_of` (the deferred
// graph, whose pending values have types but no buffers yet).
using SlotOf = std::function<CallLayout::Slot(runtime::DeviceStorage*)>;
CallLayout layout_of(const OpCall& call, const SlotOf& slot_of);
// Storages the program must read that have no buffer yet (they read as zeros).
std::vector<runtime::DeviceStorage*> unmaterialized(const CallLayout& layout);

// Everything that selects a distinct executable: op, attributes, slot buffer types, view
// shapes and strides, dtypes. Offsets and scalar values are runtime arguments, not part of it.
std::string signature(const OpCall& call, const CallLayout& layout);
// The same, written into `key` (cleared first; its capacity is reused).
void signature_into(const OpCall& call, const CallLayout& layout, std::string& key);

struct ProgramPlan {
  struct Arg {
    enum class Kind { kSlot, kInputOffset, kOutputOffset, kScalar };
    Kind kind;
    int index;  // slot, input or output index
  };
  std::vector<Arg> args;
  std::vector<int> donatable_args;           // slot arguments aliased to an output
  std::vector<hlo::TensorType> output_types;  // one per program output (= per call output)
};

// The run-time value of a non-slot argument (an offset or a scalar) of `call`.
ScalarValue runtime_value(const OpCall& call, ProgramPlan::Arg arg);

struct BuiltProgram {
  std::string mlir;
  ProgramPlan plan;
};

// Emits `call` into `b`: reads its input views from `slot_values` (one per layout slot), runs
// the op's lowering and writes outputs into their target views. Offsets and scalars become
// values made by `runtime_arg` (program parameters), requested in ProgramPlan::args order.
// Per call output: its value (a fresh result, or the new whole contents of the target's
// storage) and the slot whose buffer it may reuse (-1: none).
struct EmittedOutput {
  hlo::Value value;
  int alias_slot = -1;
};
using RuntimeArg = std::function<hlo::Value(const hlo::TensorType&, ProgramPlan::Arg)>;
std::vector<EmittedOutput> emit_call(hlo::Builder& b, const OpCall& call, const CallLayout& layout,
                                     const std::vector<hlo::Value>& slot_values,
                                     const RuntimeArg& runtime_arg);

// Builds the program; throws std::invalid_argument with a readable message when the lowering
// is missing or the call is inconsistent (e.g. an in-place output of the wrong shape).
BuiltProgram build_program(const OpCall& call, const CallLayout& layout);

}  // namespace tpu::exec
