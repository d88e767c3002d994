// index_in_range: the verdict of the opt-in index bounds check (aten/index_checks.h). Inputs are
// index tensors (int64); attrs lo[i], hi[i] bound input i. Output: a bool scalar, true when every
// element of every input lies in [lo[i], hi[i]). One small program per distinct bounds.
#include "lowering/hlo_names.h"
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

std::vector<hlo::Value> lower_index_in_range(Context& ctx, const std::vector<hlo::Value>& in) {
  auto& b = ctx.b;
  const Dims& lo = ctx.attrs.get_ints("lo");
  const Dims& hi = ctx.attrs.get_ints("hi");
  hlo::Value ok = b.constant(ElementType::kBool, 1);
  for (size_t i = 0; i < in.size(); ++i) {
    hlo::Value idx = b.convert(in[i], ElementType::kI64);
    const TensorType t = b.type(idx);
    // The bounds as int64 constants (exact, unlike a double constant for huge sizes).
    hlo::Value lo_c = b.broadcast_to(b.constant_int(ElementType::kI64, lo[i]), t.dims);
    hlo::Value hi_c = b.broadcast_to(b.constant_int(ElementType::kI64, hi[i]), t.dims);
    hlo::Value inside = b.binary("stablehlo.and", b.compare(idx, lo_c, Compare::kGE), b.compare(idx, hi_c, Compare::kLT));
    Dims all(t.dims.size());
    for (size_t d = 0; d < all.size(); ++d) all[d] = static_cast<int64_t>(d);
    hlo::Value part = all.empty() ? inside : b.reduce(inside, b.constant(ElementType::kBool, 1), all, ReduceKind::kAnd);
    ok = b.binary("stablehlo.and", ok, part);
  }
  return {ok};
}

TPU_REGISTER_LOWERING("index_in_range", lower_index_in_range);

}  // namespace
}  // namespace tpu::lowering
