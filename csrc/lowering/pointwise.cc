#include "lowering/pointwise.h"

#include "lowering/shape_helpers.h"

namespace tpu::lowering {

bool register_pointwise(const PointwiseEntry* entries, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const PointwiseFn fn = entries[i].fn;
    register_lowering(entries[i].name, [fn](Context& ctx, const std::vector<hlo::Value>& in) {
      return std::vector<hlo::Value>{fn(ctx, broadcast_all(ctx.b, in))};
    });
  }
  return true;
}

hlo::Value scalar_like(hlo::Builder& b, hlo::Value like, double value) { return b.full(b.type(like), value); }

hlo::Value is_nan(hlo::Builder& b, hlo::Value x) { return b.compare(x, x, hlo::Compare::kNE); }

hlo::Value magnitude(hlo::Builder& b, hlo::Value x) {
  hlo::TensorType t = b.type(x);
  t.dtype = complex_part(t.dtype);
  return b.emit("stablehlo.abs", {x}, t);
}

hlo::Value logical_and(hlo::Builder& b, hlo::Value x, hlo::Value y) { return b.binary("stablehlo.and", x, y); }
hlo::Value logical_or(hlo::Builder& b, hlo::Value x, hlo::Value y) { return b.binary("stablehlo.or", x, y); }
hlo::Value logical_not(hlo::Builder& b, hlo::Value x) { return b.unary("stablehlo.not", x); }

bool has_arg(const Attrs& attrs, int index) { return (attrs.get_int("present", 0) >> index) & 1; }

}  // namespace tpu::lowering
