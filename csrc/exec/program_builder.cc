#include "exec/program_builder.h"

#include <stdexcept>

#include "exec/compile_settings.h"
#include "exec/replica_group.h"
#include "hlo/builder.h"
#include "lowering/cast.h"
#include "lowering/registry.h"
#include "lowering/view_access.h"

namespace tpu::exec {

using hlo::Builder;
using hlo::TensorType;
using hlo::Value;

namespace {

int find_slot(const CallLayout& layout, const runtime::DeviceStorage* s) {
  for (size_t i = 0; i < layout.slots.size(); ++i) {
    if (layout.slots[i].storage == s) return static_cast<int>(i);
  }
  return -1;
}

int add_slot(CallLayout& layout, runtime::DeviceStorage* s, const SlotOf& slot_of) {
  int i = find_slot(layout, s);
  if (i >= 0) return i;
  layout.slots.push_back(slot_of(s));
  return static_cast<int>(layout.slots.size()) - 1;
}

template <typename T>
void put(std::string& key, T v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_dims(std::string& key, const hlo::Dims& d) {
  put<uint8_t>(key, static_cast<uint8_t>(d.size()));
  key.append(reinterpret_cast<const char*>(d.data()), d.size() * sizeof(int64_t));
}

}  // namespace

CallLayout layout_of(const OpCall& call) {
  return layout_of(call, [](runtime::DeviceStorage* s) {
    CallLayout::Slot slot{s, s->contents(), false};
    slot.present = slot.contents.buffer != nullptr;
    return slot;
  });
}

CallLayout layout_of(const OpCall& call, const SlotOf& slot_of) {
  CallLayout L;
  L.slots.reserve(call.inputs.size() + call.outputs.size());
  L.input_slot.reserve(call.inputs.size());
  L.output_slot.reserve(call.outputs.size());
  for (const Input& in : call.inputs) {
    if (in.kind == Input::Kind::kScalar) {
      L.input_slot.push_back(-1);
      L.input_identity.push_back(false);
      continue;
    }
    const int slot = add_slot(L, in.storage, slot_of);
    L.input_slot.push_back(slot);
    const auto& c = L.slots[slot].contents;
    L.input_identity.push_back(L.slots[slot].present && c.type.dtype == in.view.dtype &&
                               in.view.offset == 0 &&
                               lowering::is_contiguous(in.view.sizes, in.view.strides) &&
                               in.view.numel() == c.type.numel());
  }
  for (const auto& out : call.outputs) {
    if (!out) {
      L.output_slot.push_back(-1);
      L.output_whole.push_back(false);
      continue;
    }
    const bool whole =
        out->view.offset == 0 && lowering::is_contiguous(out->view.sizes, out->view.strides) &&
        static_cast<size_t>(out->view.numel()) * element_size(out->view.dtype) ==
            out->storage->nbytes();
    L.output_whole.push_back(whole);
    L.output_slot.push_back(whole ? find_slot(L, out->storage) : add_slot(L, out->storage, slot_of));
  }
  return L;
}

std::vector<runtime::DeviceStorage*> unmaterialized(const CallLayout& layout) {
  std::vector<runtime::DeviceStorage*> out;
  for (const auto& slot : layout.slots) {
    if (!slot.present) out.push_back(slot.storage);
  }
  return out;
}

std::string signature(const OpCall& call, const CallLayout& L) {
  std::string key;
  signature_into(call, L, key);
  return key;
}

void signature_into(const OpCall& call, const CallLayout& L, std::string& key) {
  key.clear();
  key += call.op;
  key.push_back('\0');
  call.attrs.append_to_key(key);
  key.push_back('\1');
  put<uint16_t>(key, static_cast<uint16_t>(L.slots.size()));
  for (const auto& slot : L.slots) {
    put<uint8_t>(key, static_cast<uint8_t>(slot.contents.type.dtype));
    put_dims(key, slot.contents.type.dims);
  }
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Input& in = call.inputs[i];
    if (in.kind == Input::Kind::kScalar) {
      put<uint8_t>(key, 0xff);
      put<uint8_t>(key, static_cast<uint8_t>(in.scalar.dtype));
      continue;
    }
    put<uint8_t>(key, static_cast<uint8_t>(L.input_slot[i]));
    put<uint8_t>(key, L.input_identity[i] ? 1 : 0);
    put<uint8_t>(key, static_cast<uint8_t>(in.view.dtype));
    put<uint8_t>(key, static_cast<uint8_t>(in.compute));
    put_dims(key, in.view.sizes);
    if (!L.input_identity[i]) put_dims(key, in.view.strides);
  }
  key.push_back('\2');
  for (size_t i = 0; i < call.outputs.size(); ++i) {
    const auto& out = call.outputs[i];
    if (!out) {
      put<uint8_t>(key, 0);
      continue;
    }
    put<uint8_t>(key, L.output_whole[i] ? 1 : 2);
    put<int16_t>(key, static_cast<int16_t>(L.output_slot[i]));
    put<uint8_t>(key, static_cast<uint8_t>(out->view.dtype));
    put_dims(key, out->view.sizes);
    if (!L.output_whole[i]) put_dims(key, out->view.strides);
  }
  if (const std::string& settings = settings_key(); !settings.empty()) {
    key.push_back('\4');
    key += settings;
  }
  if (call.group != nullptr) {
    key.push_back('\3');
    put_dims(key, call.group->devices());
  }
}

namespace {

// The view of `flat` reinterpreted as `dtype` and read at `offset`.
Value read_view(Builder& b, Value slot_param, const View& view, Value offset) {
  Value flat = b.reshape(slot_param, {b.type(slot_param).numel()});
  flat = lowering::reinterpret_flat(b, flat, view.dtype);
  return lowering::read_strided(b, flat, offset, view.sizes, view.strides);
}

[[noreturn]] void shape_mismatch(const OpCall& call, const hlo::Dims& target, const hlo::Dims& got) {
  throw std::invalid_argument(std::string(call.label) + ": output with shape " +
                              hlo::dims_str(target) + " doesn't match the broadcast shape " +
                              hlo::dims_str(got));
}

}  // namespace

ScalarValue runtime_value(const OpCall& call, ProgramPlan::Arg arg) {
  switch (arg.kind) {
    case ProgramPlan::Arg::Kind::kInputOffset:
      return ScalarValue::integral(ElementType::kI64, call.inputs[arg.index].view.offset);
    case ProgramPlan::Arg::Kind::kOutputOffset:
      return ScalarValue::integral(ElementType::kI64, call.outputs[arg.index]->view.offset);
    case ProgramPlan::Arg::Kind::kScalar:
      return call.inputs[arg.index].scalar;
    case ProgramPlan::Arg::Kind::kSlot:
      break;
  }
  throw std::logic_error("a slot argument has no scalar value");
}

std::vector<EmittedOutput> emit_call(Builder& b, const OpCall& call, const CallLayout& L,
                                     const std::vector<Value>& slot_values,
                                     const RuntimeArg& runtime_arg) {
  const lowering::LowerFn* lower = lowering::find_lowering(call.op);
  if (lower == nullptr) {
    throw std::invalid_argument(std::string("torch_tpu has no lowering named '") + call.op +
                                "' (needed by " + call.label + ")");
  }
  const TensorType offset_type{ElementType::kI64, {}};
  std::vector<Value> values;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Input& in = call.inputs[i];
    if (in.kind == Input::Kind::kScalar) {
      values.push_back(runtime_arg(TensorType{in.scalar.dtype, {}},
                                   {ProgramPlan::Arg::Kind::kScalar, static_cast<int>(i)}));
      continue;
    }
    Value slot = slot_values[L.input_slot[i]];
    Value v;
    if (L.input_identity[i]) {
      v = b.reshape(slot, in.view.sizes);
    } else {
      Value offset = runtime_arg(offset_type, {ProgramPlan::Arg::Kind::kInputOffset, static_cast<int>(i)});
      v = read_view(b, slot, in.view, offset);
    }
    values.push_back(lowering::cast(b, v, in.compute));
  }

  lowering::Context ctx{b, call.attrs};
  std::vector<Value> results = (*lower)(ctx, values);
  if (results.size() != call.outputs.size()) {
    throw std::invalid_argument(std::string(call.label) + ": lowering '" + call.op + "' produced " +
                                std::to_string(results.size()) + " outputs, the call expects " +
                                std::to_string(call.outputs.size()));
  }

  std::vector<bool> slot_written(L.slots.size(), false);
  std::vector<EmittedOutput> outputs;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& target = call.outputs[i];
    if (!target) {
      outputs.push_back({results[i], -1});
      continue;
    }
    const View& view = target->view;
    if (b.dims(results[i]) != view.sizes) shape_mismatch(call, view.sizes, b.dims(results[i]));
    Value v = lowering::cast(b, results[i], view.dtype);
    const int slot = L.output_slot[i];
    if (slot >= 0) {
      if (slot_written[slot]) {
        throw std::invalid_argument(std::string(call.label) +
                                    ": two outputs are written into the same storage");
      }
      slot_written[slot] = true;
    }
    if (L.output_whole[i]) {
      int alias = -1;
      if (slot >= 0 && L.slots[slot].contents.type.dtype == view.dtype) {
        v = b.reshape(v, L.slots[slot].contents.type.dims);
        alias = slot;
      }
      outputs.push_back({v, alias});
      continue;
    }
    const TensorType& st = L.slots[slot].contents.type;
    Value offset = runtime_arg(offset_type, {ProgramPlan::Arg::Kind::kOutputOffset, static_cast<int>(i)});
    Value flat = b.reshape(slot_values[slot], {st.numel()});
    Value as_view = lowering::reinterpret_flat(b, flat, view.dtype);
    Value written = lowering::write_strided(b, as_view, offset, view.sizes, view.strides, v);
    if (view.dtype != st.dtype) {
      written = lowering::reinterpret_flat(b, written, st.dtype);
      if (b.dims(written)[0] != st.numel()) written = b.slice(written, {0}, {st.numel()}, {1});
    }
    outputs.push_back({b.reshape(written, st.dims), slot});
  }
  return outputs;
}

BuiltProgram build_program(const OpCall& call, const CallLayout& L) {
  BuiltProgram out;
  ProgramPlan& plan = out.plan;
  Builder b;
  if (call.group != nullptr) b.set_num_replicas(static_cast<int64_t>(call.group->devices().size()));
  std::vector<Value> slot_params;
  for (size_t s = 0; s < L.slots.size(); ++s) {
    slot_params.push_back(b.parameter(L.slots[s].contents.type));
    plan.args.push_back({ProgramPlan::Arg::Kind::kSlot, static_cast<int>(s)});
  }
  auto emitted = emit_call(b, call, L, slot_params, [&](const TensorType& t, ProgramPlan::Arg arg) {
    plan.args.push_back(arg);
    return b.parameter(t);
  });
  std::vector<Value> program_outputs;
  for (size_t i = 0; i < emitted.size(); ++i) {
    if (emitted[i].alias_slot >= 0) {
      b.alias_parameter_to_output(slot_params[emitted[i].alias_slot], static_cast<int>(i));
      plan.donatable_args.push_back(emitted[i].alias_slot);
    }
    program_outputs.push_back(emitted[i].value);
    plan.output_types.push_back(b.type(emitted[i].value));
  }
  out.mlir = b.module_text(program_outputs);
  return out;
}

}  // namespace tpu::exec
