#include "exec/zero_fill.h"

namespace tpu::exec {

OpCall zero_fill_call(const OpCall& call, const runtime::DeviceStorage& storage) {
  const runtime::DeviceStorage* s = &storage;
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
  return fill;
}

}  // namespace tpu::exec
