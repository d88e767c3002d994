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

namespace {
hlo::TensorType part_of(hlo::Builder& b, hlo::Value x) {
  hlo::TensorType t = b.type(x);
  t.dtype = complex_part(t.dtype);
  return t;
}
}  // namespace

hlo::Value magnitude(hlo::Builder& b, hlo::Value x) { return b.emit("stablehlo.abs", {x}, part_of(b, x)); }

hlo::Value real_part(hlo::Builder& b, hlo::Value x) {
  return is_complex(b.dtype(x)) ? b.emit("stablehlo.real", {x}, part_of(b, x)) : x;
}

hlo::Value imag_part(hlo::Builder& b, hlo::Value x) {
  return is_complex(b.dtype(x)) ? b.emit("stablehlo.imag", {x}, part_of(b, x)) : b.full(b.type(x), 0);
}

hlo::Value conjugate(hlo::Builder& b, hlo::Value x) {
  if (!is_complex(b.dtype(x))) return x;
  return b.emit("stablehlo.complex", {real_part(b, x), b.neg(imag_part(b, x))}, b.type(x));
}

hlo::Value is_finite(hlo::Builder& b, hlo::Value x) {
  const hlo::TensorType flags{ElementType::kBool, b.dims(x)};
  if (is_complex(b.dtype(x))) return logical_and(b, is_finite(b, real_part(b, x)), is_finite(b, imag_part(b, x)));
  return is_floating(b.dtype(x)) ? b.emit("stablehlo.is_finite", {x}, flags) : b.full(flags, 1);
}

hlo::Value logical_and(hlo::Builder& b, hlo::Value x, hlo::Value y) { return b.binary("stablehlo.and", x, y); }
hlo::Value logical_or(hlo::Builder& b, hlo::Value x, hlo::Value y) { return b.binary("stablehlo.or", x, y); }
hlo::Value logical_not(hlo::Builder& b, hlo::Value x) { return b.unary("stablehlo.not", x); }

bool has_arg(const Attrs& attrs, int index) { return (attrs.get_int("present", 0) >> index) & 1; }

}  // namespace tpu::lowering
