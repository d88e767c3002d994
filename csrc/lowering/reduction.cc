// Reductions: sum and mean over a set of dims. The input arrives in the accumulation dtype
// (float32 for half types, int64 for integers, as PyTorch accumulates); the result is
// converted to attrs.out_dtype.
#include "lowering/cast.h"
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using hlo::Value;

Value sum_over(hlo::Builder& b, Value x, const hlo::Dims& dims) {
  return b.reduce(x, b.constant(b.dtype(x), 0), dims, hlo::ReduceKind::kSum);
}

Value finish(Context& ctx, Value reduced, Value input) {
  auto& b = ctx.b;
  if (ctx.attrs.get_bool("keepdim", false)) {
    reduced = keep_dims(b, reduced, b.dims(input), ctx.attrs.get_ints("dims"));
  }
  return cast(b, reduced, ctx.attrs.get_dtype("out_dtype"));
}

// attrs: dims (normalised, sorted, unique), keepdim, out_dtype.
std::vector<Value> lower_sum(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  Value x = in[0];
  if (b.dtype(x) == ElementType::kBool) x = b.convert(x, ElementType::kI64);
  return {finish(ctx, sum_over(b, x, ctx.attrs.get_ints("dims")), in[0])};
}

std::vector<Value> lower_mean(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const auto& dims = ctx.attrs.get_ints("dims");
  int64_t count = 1;
  for (int64_t d : dims) count *= b.dims(in[0])[d];
  Value s = sum_over(b, in[0], dims);
  Value mean = b.div(s, b.full(b.type(s), static_cast<double>(count)));
  return {finish(ctx, mean, in[0])};
}

TPU_REGISTER_LOWERING("sum", lower_sum);
TPU_REGISTER_LOWERING("mean", lower_mean);

}  // namespace
}  // namespace tpu::lowering
