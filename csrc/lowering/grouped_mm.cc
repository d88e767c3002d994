// _grouped_mm: the jagged matrix products of Mixture-of-Experts layers (also torch.tpu.ops.ragged_dot),
// at the cost of the ragged products and with no host sync. PyTorch's generic kernel reads the
// offsets on the host and runs one mm per group, so every new group size would be a new program.
//
// Sorted tiles: the grouped dimension (rows of a, the contraction, or columns of b) is cut into
// tiles of T positions, each group's positions starting a new tile, so every tile belongs to one
// group. The layout is computed on the device from the offsets; its size is static (at most
// ceil(length / T) + G tiles), so one program serves every split. Each tile is one block of a
// batched dot with its group's operand, and positions of no group (padding, past offs[-1]) are
// zeros that a scatter with an out-of-range index drops. The work is that of the ragged product
// plus at most one padded tile per group - not G times the dense product.
//
//   2D x 3D (offs over rows of a):    a [M, K], b [G, K, N] -> [M, N]   (rows past offs[-1]: 0)
//   2D x 2D (offs over K):            a [M, K], b [K, N]    -> [G, M, N]
//   3D x 2D (offs over columns of b): a [G, M, K], b [K, N] -> [M, N]   (columns past offs[-1]: 0)
//   3D x 3D (no offs):                a [G, M, K], b [G, K, N] -> [G, M, N]
//
// attrs: out_float32 (bf16/f16 inputs returning their float32 accumulation).
#include "lowering/hlo_names.h"
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

#include <stdexcept>

namespace tpu::lowering {
namespace {

constexpr ElementType kI64 = ElementType::kI64;

// Tile rows: about half a group's average size (so padding adds at most about half the work),
// a power of two in [8, 128].
int64_t tile_size(int64_t length, int64_t groups) {
  const int64_t per_group = std::max<int64_t>(1, (length + 2 * groups - 1) / (2 * groups));
  int64_t t = 8;
  while (t < per_group && t < 128) t *= 2;
  return t;
}

struct Tiles {
  int64_t count = 0, size = 0;
  Value group;   // [count] i64: the tile's group; >= G for tiles past the last group's
  Value valid;   // [count, size] bool: the position holds an element of its group
  Value source;  // [count, size] i64: that element's index (0 where not valid)
  Value dest;    // [count, size] i64: the index, or `length` (out of range) where not valid
};

Value i64s(Builder& b, const Dims& dims, int64_t v) { return b.full(TensorType{kI64, dims}, static_cast<double>(v)); }

// The tile layout of `length` positions split into groups by `offs` (cumulative ends).
Tiles tile_layout(Builder& b, Value offs, int64_t length) {
  const int64_t g = b.dims(offs)[0];
  Tiles t;
  t.size = tile_size(length, g);
  t.count = (length + t.size - 1) / t.size + g;
  Value ends = b.convert(offs, kI64);
  Value starts = b.concatenate({i64s(b, {1}, 0), b.slice(ends, {0}, {g - 1}, {1})}, 0);
  Value sizes = b.max(b.sub(ends, starts), i64s(b, {g}, 0));
  Value tiles = b.div(b.add(sizes, i64s(b, {g}, t.size - 1)), i64s(b, {g}, t.size));
  // Inclusive cumulative sum of the tile counts: tile_end[j] = sum over i <= j of tiles[i].
  Value below = b.compare(b.iota(TensorType{kI64, {g, g}}, 0), b.iota(TensorType{kI64, {g, g}}, 1), Compare::kLE);
  Value spread = b.select(below, b.broadcast_in_dim(tiles, {g, g}, {0}), i64s(b, {g, g}, 0));
  Value tile_end = b.reduce(spread, b.constant_int(kI64, 0), {0}, ReduceKind::kSum);
  // Tile k's group: how many groups end at or before it.
  Value k = b.iota(TensorType{kI64, {t.count, g}}, 0);
  Value ended = b.convert(b.compare(b.broadcast_in_dim(tile_end, {t.count, g}, {1}), k, Compare::kLE), kI64);
  t.group = b.reduce(ended, b.constant_int(kI64, 0), {1}, ReduceKind::kSum);
  Value in_group = b.compare(t.group, i64s(b, {t.count}, g), Compare::kLT);
  Value group = b.min(t.group, i64s(b, {t.count}, g - 1));
  Value first = b.sub(b.gather_flat(tile_end, group), b.gather_flat(tiles, group));
  const Dims grid{t.count, t.size};
  Value tile_index = b.sub(b.iota(TensorType{kI64, grid}, 0), b.broadcast_in_dim(first, grid, {0}));
  Value within = b.add(b.mul(tile_index, i64s(b, grid, t.size)), b.iota(TensorType{kI64, grid}, 1));
  Value index = b.add(b.broadcast_in_dim(b.gather_flat(starts, group), grid, {0}), within);
  t.valid = b.binary("stablehlo.and", b.broadcast_in_dim(in_group, grid, {0}),
                     b.compare(within, b.broadcast_in_dim(b.gather_flat(sizes, group), grid, {0}), Compare::kLT));
  t.valid = b.binary("stablehlo.and", t.valid, b.compare(index, i64s(b, grid, length), Compare::kLT));
  t.source = b.select(t.valid, index, i64s(b, grid, 0));
  t.dest = b.select(t.valid, index, i64s(b, grid, length));
  return t;
}

// Slices of `x` along dim 0 picked by `idx` (any shape, i64): [idx..., x.dims[1:]...].
Value take(Builder& b, Value x, Value idx) {
  const Dims xd = b.dims(x), id = b.dims(idx);
  const int64_t n = b.type(idx).numel();
  Builder::GatherDims g;
  for (size_t d = 1; d < xd.size(); ++d) g.offset_dims.push_back(static_cast<int64_t>(d));
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  g.slice_sizes = xd;
  g.slice_sizes[0] = 1;
  Dims flat{n};
  flat.insert(flat.end(), xd.begin() + 1, xd.end());
  Value rows = b.gather(x, b.reshape(idx, {n, 1}), g, flat);
  Dims out = id;
  out.insert(out.end(), xd.begin() + 1, xd.end());
  return b.reshape(rows, out);
}

// The tiles' elements of `x` (rows along dim 0): [count, size, x.dims[1]], zero where not valid.
Value tile_rows(Builder& b, Value x, const Tiles& t) {
  Value rows = take(b, x, t.source);
  Value keep = b.broadcast_in_dim(t.valid, b.dims(rows), {0, 1});
  return b.select(keep, rows, b.full(b.type(rows), 0));
}

// Adds `updates` (slices along its leading dims `idx` indexes) into `base` at rows `idx`;
// out-of-range indices are dropped.
Value scatter_add(Builder& b, Value base, Value idx, Value updates) {
  const Dims bd = b.dims(base);
  const int64_t n = b.type(idx).numel();
  Dims flat{n};
  flat.insert(flat.end(), bd.begin() + 1, bd.end());
  Builder::ScatterDims s;
  for (size_t d = 1; d < bd.size(); ++d) s.update_window_dims.push_back(static_cast<int64_t>(d));
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  return b.scatter(base, b.reshape(idx, {n, 1}), b.reshape(updates, flat), s, "stablehlo.add");
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
    const int64_t m = b.dims(a)[0], n = b.dims(w)[2];
    Tiles tiles = tile_layout(b, in[2], m);
    Value x = tile_rows(b, a, tiles);                                         // [tiles, T, K]
    Value wt = take(b, w, b.min(tiles.group, i64s(b, {tiles.count}, b.dims(w)[0] - 1)));  // [tiles, K, N]
    Value y = b.dot_general(x, wt, {0}, {0}, {2}, {1}, acc, exact);           // [tiles, T, N]
    r = scatter_add(b, b.full(TensorType{acc, {m, n}}, 0), tiles.dest, y);
  } else if (ra == 2 && rw == 2) {
    const int64_t m = b.dims(a)[0], k = b.dims(a)[1], n = b.dims(w)[1], g = b.dims(in[2])[0];
    Tiles tiles = tile_layout(b, in[2], k);
    Value x = tile_rows(b, b.transpose(a, {1, 0}), tiles);                    // [tiles, T, M]
    Value y = tile_rows(b, w, tiles);                                         // [tiles, T, N]
    Value per_tile = b.dot_general(x, y, {0}, {0}, {1}, {1}, acc, exact);     // [tiles, M, N]
    r = scatter_add(b, b.full(TensorType{acc, {g, m, n}}, 0), tiles.group, per_tile);
  } else {
    const int64_t m = b.dims(a)[1], n = b.dims(w)[1];
    Tiles tiles = tile_layout(b, in[2], n);
    Value x = tile_rows(b, b.transpose(w, {1, 0}), tiles);                    // [tiles, T, K]
    Value at = take(b, a, b.min(tiles.group, i64s(b, {tiles.count}, b.dims(a)[0] - 1)));  // [tiles, M, K]
    Value y = b.dot_general(x, at, {0}, {0}, {2}, {2}, acc, exact);           // [tiles, T, M]
    r = b.transpose(scatter_add(b, b.full(TensorType{acc, {n, m}}, 0), tiles.dest, y), {1, 0});
  }
  return {b.convert(r, out)};
}

TPU_REGISTER_LOWERING("grouped_mm", lower_grouped_mm);

}  // namespace
}  // namespace tpu::lowering
