// Lowerings that create values: full, arange, eye.
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

using hlo::TensorType;
using hlo::Value;

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
TPU_REGISTER_LOWERING("eye", lower_eye);

}  // namespace
}  // namespace tpu::lowering
