// Lowerings that create values: full, arange, linspace/logspace, eye.
#include <algorithm>

#include "lowering/hlo_names.h"
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

// full: inputs [value]; attrs shape. Output dtype = the value's dtype.
std::vector<Value> lower_full(Context& ctx, const std::vector<Value>& in) {
  return {ctx.b.broadcast_in_dim(in[0], ctx.attrs.get_ints("shape"), {})};
}

// arange: inputs [start, step] (compute dtype); attrs size. out[i] = start + i * step.
std::vector<Value> lower_arange(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const int64_t n = ctx.attrs.get_int("size");
  const TensorType t{b.dtype(in[0]), {n}};
  Value i = b.convert(b.iota(TensorType{ElementType::kI64, {n}}, 0), t.dtype);
  Value start = b.broadcast_in_dim(in[0], {n}, {});
  Value step = b.broadcast_in_dim(in[1], {n}, {});
  return {b.add(start, b.mul(i, step))};
}

// linspace: inputs [start, end, step] (compute dtype); attrs steps, (base for logspace). Like
// ATen, the first half counts up from start and the second half down from end.
std::vector<Value> lower_linspace(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  const int64_t n = ctx.attrs.get_int("steps");
  const TensorType t{b.dtype(in[0]), {n}};
  auto bcast = [&](Value v) { return b.broadcast_in_dim(v, {n}, {}); };
  Value i = b.convert(b.iota(TensorType{ElementType::kI64, {n}}, 0), t.dtype);
  Value rest = b.convert(b.iota(TensorType{ElementType::kI64, {n}}, 0), ElementType::kI64);
  rest = b.convert(b.sub(b.full(b.type(rest), static_cast<double>(n - 1)), rest), t.dtype);
  Value up = b.add(bcast(in[0]), b.mul(bcast(in[2]), i));
  Value down = b.sub(bcast(in[1]), b.mul(bcast(in[2]), rest));
  Value first_half = b.compare(b.iota(TensorType{ElementType::kI64, {n}}, 0),
                               b.full(TensorType{ElementType::kI64, {n}}, static_cast<double>(n / 2)), hlo::Compare::kLT);
  Value r = n == 1 ? bcast(in[0]) : b.select(first_half, up, down);
  if (ctx.attrs.has("base")) r = b.binary("stablehlo.power", b.full(t, ctx.attrs.get_float("base")), r);
  return {r};
}

// eye: attrs n, m, dtype. Ones on the main diagonal.
std::vector<Value> lower_eye(Context& ctx, const std::vector<Value>&) {
  auto& b = ctx.b;
  const hlo::Dims dims{ctx.attrs.get_int("n"), ctx.attrs.get_int("m")};
  const TensorType idx{ElementType::kI64, dims};
  Value diag = b.compare(b.iota(idx, 0), b.iota(idx, 1), hlo::Compare::kEQ);
  return {b.convert(diag, ctx.attrs.get_dtype("dtype"))};
}

TPU_REGISTER_LOWERING("full", lower_full);
TPU_REGISTER_LOWERING("arange", lower_arange);
TPU_REGISTER_LOWERING("linspace", lower_linspace);
TPU_REGISTER_LOWERING("eye", lower_eye);

}  // namespace
}  // namespace tpu::lowering
