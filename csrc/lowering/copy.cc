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
