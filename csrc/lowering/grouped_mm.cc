// _grouped_mm: the jagged matrix products of Mixture-of-Experts layers, as ONE dot with no host
// sync (PyTorch's generic kernel reads the offsets on the host and runs one mm per group, so
// every new group size is a new program). Each group's slice is selected by a mask built from
// the offsets on the device; masked-out terms are exact zeros, so results equal a per-group mm.
//
//   2D x 3D (offs over rows of a):    a [M, K], b [G, K, N] -> [M, N]   (rows past offs[-1]: 0)
//   2D x 2D (offs over K):            a [M, K], b [K, N]    -> [G, M, N]
//   3D x 2D (offs over columns of b): a [G, M, K], b [K, N] -> [M, N]
//   3D x 3D (no offs):                a [G, M, K], b [G, K, N] -> [G, M, N]
//
// attrs: out_float32 (bf16/f16 inputs returning their float32 accumulation).
#include "lowering/hlo_names.h"
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

#include <stdexcept>

namespace tpu::lowering {
namespace {

// [length, G] bool: position p lies in group g, i.e. offs[g-1] <= p < offs[g] (offs[-1] = 0).
Value group_mask(Builder& b, Value offs, int64_t length) {
  const int64_t groups = b.dims(offs)[0];
  Value end = b.convert(offs, ElementType::kI64);
  Value start = b.concatenate({b.full(TensorType{ElementType::kI64, {1}}, 0), b.slice(end, {0}, {groups - 1}, {1})}, 0);
  const Dims shape{length, groups};
  Value pos = b.iota(TensorType{ElementType::kI64, shape}, 0);
  Value lo = b.broadcast_in_dim(start, shape, {1});
  Value hi = b.broadcast_in_dim(end, shape, {1});
  return b.binary("stablehlo.and", b.compare(pos, lo, Compare::kGE), b.compare(pos, hi, Compare::kLT));
}

// `v` where `mask` (broadcast along `mapping`) holds, else 0.
Value keep(Builder& b, Value v, Value mask, const Dims& mapping) {
  Value m = b.broadcast_in_dim(mask, b.dims(v), mapping);
  return b.select(m, v, b.full(b.type(v), 0));
}

std::vector<Value> lower_grouped_mm(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  Value a = in[0], w = in[1];
  const ElementType t = b.dtype(a);
  const bool half = t == ElementType::kF16 || t == ElementType::kBF16;
  const ElementType acc = half ? ElementType::kF32 : t;
  const ElementType out = ctx.attrs.get_bool("out_float32", false) ? ElementType::kF32 : t;
  const int64_t ra = b.type(a).rank(), rw = b.type(w).rank();
  if ((ra != 2 && ra != 3) || (rw != 2 && rw != 3)) {
    throw std::invalid_argument("grouped_mm: multiplicands must be 2D or 3D, got " + b.type(a).str() + " and " +
                                b.type(w).str());
  }
  const bool exact = is_floating(t);
  Value r;
  if (ra == 3 && rw == 3) {  // a batch of equal-sized products
    r = b.dot_general(a, w, {0}, {0}, {2}, {1}, acc, exact);
  } else if (ra == 2 && rw == 3) {
    const int64_t m = b.dims(a)[0], g = b.dims(w)[0], k = b.dims(a)[1];
    // [M, G, K]: row m's copy for group g is kept only when m belongs to g; contracting over (G, K)
    // then multiplies each row by its own group's matrix.
    Value spread = b.broadcast_in_dim(a, {m, g, k}, {0, 2});
    spread = keep(b, spread, group_mask(b, in[2], m), {0, 1});
    r = b.dot_general(spread, w, {}, {}, {1, 2}, {0, 1}, acc, exact);
  } else if (ra == 2 && rw == 2) {
    const int64_t k = b.dims(w)[0], n = b.dims(w)[1], g = b.dims(in[2])[0];
    // [G, K, N]: group g keeps its rows of b, so a @ that is the product over g's slice of K.
    Value spread = b.broadcast_in_dim(w, {g, k, n}, {1, 2});
    spread = keep(b, spread, group_mask(b, in[2], k), {1, 0});
    r = b.transpose(b.dot_general(a, spread, {}, {}, {1}, {1}, acc, exact), {1, 0, 2});  // [M,G,N] -> [G,M,N]
  } else {
    const int64_t k = b.dims(w)[0], n = b.dims(w)[1], g = b.dims(a)[0];
    // [G, K, N]: column n of b is kept only in its own group; contracting over (G, K).
    Value spread = b.broadcast_in_dim(w, {g, k, n}, {1, 2});
    spread = keep(b, spread, group_mask(b, in[2], n), {2, 0});
    r = b.dot_general(a, spread, {}, {}, {0, 2}, {0, 1}, acc, exact);
  }
  return {b.convert(r, out)};
}

TPU_REGISTER_LOWERING("grouped_mm", lower_grouped_mm);

}  // namespace
}  // namespace tpu::lowering
