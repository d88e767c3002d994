// hash_tensor (mode 0): the elements, already widened to float64 or int64 by the aten kernel,
// reinterpreted as uint64 and xor-reduced over attr "dims" (keepdim as in other reductions).
#include "lowering/hlo_names.h"
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

Args lower_hash_tensor(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Dims& dims = ctx.attrs.get_ints("dims");
  const Dims in_dims = b.dims(in[0]);
  Value bits = b.bitcast_convert(in[0], TensorType{ElementType::kU64, in_dims});
  Value h = b.reduce_multi({bits}, {b.constant_int(ElementType::kU64, 0)}, dims,
                           [&](const Args& v) { return Args{b.binary("stablehlo.xor", v[0], v[1])}; })[0];
  if (ctx.attrs.get_bool("keepdim", false)) h = keep_dims(b, h, in_dims, dims);
  return {h};
}

}  // namespace

TPU_REGISTER_LOWERING("hash_tensor", lower_hash_tensor);

}  // namespace tpu::lowering
