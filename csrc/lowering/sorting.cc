// sort and topk along a dim: values with their indices, NaN ordered as the largest value,
// stable (equal elements keep their order), as ATen's CPU kernels do.
#include "lowering/hlo_names.h"
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

// Whether a sorts before c.
Value before(Builder& b, Value a, Value c, bool descending) {
  Value order = b.compare(a, c, descending ? Compare::kGT : Compare::kLT);
  if (!is_floating(b.dtype(a))) return order;
  Value a_nan = b.compare(a, a, Compare::kNE);
  Value c_nan = b.compare(c, c, Compare::kNE);
  Value nan_order = descending ? b.binary("stablehlo.and", a_nan, b.unary("stablehlo.not", c_nan))
                               : b.binary("stablehlo.and", b.unary("stablehlo.not", a_nan), c_nan);
  return b.binary("stablehlo.or", order, nan_order);
}

std::vector<Value> sort_with_indices(Builder& b, Value x, int64_t dim, bool descending) {
  Value idx = b.iota(TensorType{ElementType::kI64, b.dims(x)}, dim);
  return b.sort({x, idx}, dim, /*stable=*/true, [&](const std::vector<Value>& a) {
    return std::vector<Value>{before(b, a[0], a[1], descending)};
  });
}

// sort: attrs dim, descending -> (values, indices)
Args lower_sort(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  if (b.type(x).rank() == 0) return {x, b.constant_int(ElementType::kI64, 0)};
  return sort_with_indices(b, x, ctx.attrs.get_int("dim"), ctx.attrs.get_bool("descending"));
}

// topk: attrs k, dim, largest -> (values, indices)
Args lower_topk(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  if (b.type(x).rank() == 0) return {x, b.constant_int(ElementType::kI64, 0)};
  const int64_t dim = ctx.attrs.get_int("dim");
  auto sorted = sort_with_indices(b, x, dim, ctx.attrs.get_bool("largest"));
  const Dims d = b.dims(x);
  Dims limit = d;
  limit[dim] = ctx.attrs.get_int("k");
  const Dims start(d.size(), 0), strides(d.size(), 1);
  return {b.slice(sorted[0], start, limit, strides), b.slice(sorted[1], start, limit, strides)};
}

const LoweringEntry kSorting[] = {
    {"sort", lower_sort},
    {"topk", lower_topk},
};

TPU_REGISTER_LOWERINGS(kSorting);

}  // namespace
}  // namespace tpu::lowering
