// copy: the value (already converted to the destination dtype by the executor) broadcast to
// the destination shape. Serves copy_, to(dtype), clone, expand-then-materialise.
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

std::vector<hlo::Value> lower_copy(Context& ctx, const std::vector<hlo::Value>& in) {
  return {ctx.b.broadcast_to(in[0], ctx.attrs.get_ints("shape"))};
}

TPU_REGISTER_LOWERING("copy", lower_copy);

}  // namespace
}  // namespace tpu::lowering

namespace tpu::lowering {
namespace {

// resize_bytes: input uint8[n]; keeps attrs.keep leading bytes, zero-fills up to new_nbytes.
std::vector<hlo::Value> lower_resize_bytes(Context& ctx, const std::vector<hlo::Value>& in) {
  auto& b = ctx.b;
  const int64_t keep = ctx.attrs.get_int("keep");
  const int64_t n = ctx.attrs.get_int("new_nbytes");
  hlo::Value v = b.slice(in[0], {0}, {keep}, {1});
  return {b.pad(v, b.constant(ElementType::kU8, 0), {0}, {n - keep}, {0})};
}

TPU_REGISTER_LOWERING("resize_bytes", lower_resize_bytes);

}  // namespace
}  // namespace tpu::lowering
