#include "lowering/view_access.h"
#include "lowering/hlo_names.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <stdexcept>

namespace tpu::lowering {

bool is_contiguous(const Dims& sizes, const Dims& strides) {
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

namespace {
// XLA's bitcast_convert refuses complex types: split complex values into (real, imag) pairs of
// the part type, and join pairs back, then reinterpret the parts' bytes as usual.
Value complex_to_parts(Builder& b, Value flat) {
  const int64_t n = b.dims(flat)[0];
  const TensorType part{complex_part(b.dtype(flat)), {n, 1}};
  Value c = b.reshape(flat, {n, 1});
  Value re = b.emit("stablehlo.real", {c}, part);
  Value im = b.emit("stablehlo.imag", {c}, part);
  return b.reshape(b.concatenate({re, im}, 1), {2 * n});
}
Value parts_to_complex(Builder& b, Value parts, ElementType to) {
  const int64_t n = b.dims(parts)[0];
  const int64_t padded = (n + 1) / 2 * 2;
  if (padded != n) parts = b.pad(parts, b.constant(b.dtype(parts), 0), {0}, {padded - n}, {0});
  Value pairs = b.reshape(parts, {padded / 2, 2});
  Value re = b.reshape(b.slice(pairs, {0, 0}, {padded / 2, 1}, {1, 1}), {padded / 2});
  Value im = b.reshape(b.slice(pairs, {0, 1}, {padded / 2, 2}, {1, 1}), {padded / 2});
  return b.emit("stablehlo.complex", {re, im}, TensorType{to, {padded / 2}});
}
}  // namespace

Value reinterpret_flat(Builder& b, Value flat, ElementType to) {
  const ElementType from = b.dtype(flat);
  if (from == to) return flat;
  if (is_complex(from)) return reinterpret_flat(b, complex_to_parts(b, flat), to);
  if (is_complex(to)) return parts_to_complex(b, reinterpret_flat(b, flat, complex_part(to)), to);
  if (from == ElementType::kBool) {
    return reinterpret_flat(b, b.convert(flat, ElementType::kU8), to);
  }
  if (to == ElementType::kBool) {
    Value bytes = reinterpret_flat(b, flat, ElementType::kU8);
    Value zero = b.full(b.type(bytes), 0);
    return b.compare(bytes, zero, hlo::Compare::kNE);
  }
  const int64_t n = b.dims(flat)[0];
  const int64_t from_size = static_cast<int64_t>(element_size(from));
  const int64_t to_size = static_cast<int64_t>(element_size(to));
  if (from_size == to_size) return b.bitcast_convert(flat, TensorType{to, {n}});
  if (from_size > to_size) {
    const int64_t r = from_size / to_size;
    Value split = b.bitcast_convert(flat, TensorType{to, {n, r}});
    return b.reshape(split, {n * r});
  }
  const int64_t r = to_size / from_size;
  const int64_t padded = (n + r - 1) / r * r;
  if (padded != n) flat = b.pad(flat, b.constant(from, 0), {0}, {padded - n}, {0});
  Value grouped = b.reshape(flat, {padded / r, r});
  return b.bitcast_convert(grouped, TensorType{to, {padded / r}});
}

namespace {

// How a view sits inside its storage, decided from sizes and strides alone.
struct Layout {
  std::vector<int64_t> real;   // original dims with size > 1 and stride > 0, by stride descending
  bool sliceable = false;      // expressible as slice of a reshaped segment
  Dims box;                    // row-major box the segment is reshaped to (sorted dims)
  Dims steps;                  // slice step per sorted dim
  int64_t needed = 1;          // elements from offset to the last element, inclusive
  int64_t box_size = 1;
};

Layout plan(const Dims& sizes, const Dims& strides) {
  Layout L;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > 1 && strides[i] > 0) L.real.push_back(static_cast<int64_t>(i));
  }
  std::stable_sort(L.real.begin(), L.real.end(),
                   [&](int64_t a, int64_t c) { return strides[a] > strides[c]; });
  const size_t k = L.real.size();
  for (int64_t d : L.real) L.needed += (sizes[d] - 1) * strides[d];
  if (k == 0) {
    L.sliceable = true;
    return L;
  }
  auto n = [&](size_t j) { return sizes[L.real[j]]; };
  auto s = [&](size_t j) { return strides[L.real[j]]; };
  L.box.resize(k);
  L.steps.assign(k, 1);
  L.steps[k - 1] = s(k - 1);
  if (k == 1) {
    L.box[0] = L.needed;
  } else {
    L.box[0] = n(0);
    for (size_t j = 1; j + 1 < k; ++j) {
      if (s(j - 1) % s(j) != 0 || n(j) > s(j - 1) / s(j)) return L;
      L.box[j] = s(j - 1) / s(j);
    }
    if ((n(k - 1) - 1) * s(k - 1) + 1 > s(k - 2)) return L;
    L.box[k - 1] = s(k - 2);
  }
  L.box_size = 1;
  for (int64_t e : L.box) L.box_size *= e;
  L.sliceable = true;
  return L;
}

// Sizes of the real dims in sorted order.
Dims sorted_sizes(const Layout& L, const Dims& sizes) {
  Dims out;
  for (int64_t d : L.real) out.push_back(sizes[d]);
  return out;
}

// Permutation taking "real dims in original order" to "real dims in sorted order".
Dims to_sorted_perm(const Layout& L) {
  std::vector<int64_t> orig(L.real.begin(), L.real.end());
  std::sort(orig.begin(), orig.end());
  Dims perm;
  for (int64_t d : L.real) {
    perm.push_back(std::find(orig.begin(), orig.end(), d) - orig.begin());
  }
  return perm;
}

Dims inverse(const Dims& perm) {
  Dims inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

int64_t numel(const Dims& d) {
  return std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<int64_t>());
}

// offset + sum_i iota_i * stride_i, as an i64 tensor of shape `sizes`.
Value element_indices(Builder& b, Value offset, const Dims& sizes, const Dims& strides) {
  TensorType t{ElementType::kI64, sizes};
  Value idx = b.broadcast_in_dim(offset, sizes, {});
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] <= 1 || strides[i] == 0) continue;
    Value term = b.mul(b.iota(t, static_cast<int64_t>(i)), b.full(t, static_cast<double>(strides[i])));
    idx = b.add(idx, term);
  }
  return idx;
}

// The segment [offset, offset + needed) of `flat`, reshaped to the box. The box may reach past
// the view's last element (a slice of the last dim leaves the rest of the last row out): with an
// offset known when the program is built and the storage long enough, those elements are read
// from the storage as they are (a plain slice, which XLA's loops index directly); otherwise they
// are zero padding, which costs a bounds test per element in every fused loop that reads the view.
Value read_box(Builder& b, Value flat, Value offset, const Layout& L) {
  const std::optional<int64_t> at = b.known_int(offset);
  if (L.box_size > L.needed && at && *at + L.box_size <= b.dims(flat)[0]) {
    return b.reshape(b.slice(flat, {*at}, {*at + L.box_size}, {1}), L.box);
  }
  Value seg = b.dynamic_slice(flat, {offset}, {L.needed});
  if (L.box_size > L.needed) {
    seg = b.pad(seg, b.constant(b.dtype(flat), 0), {0}, {L.box_size - L.needed}, {0});
  }
  return b.reshape(seg, L.box);
}

// The view as one strided slice of the whole storage seen as a row-major [N / s0, box[1], ...]
// array (N the storage's elements cut to whole outer rows), when the offset is known when the
// program is built and the view lies inside it: the offset becomes start indices, so no dynamic
// slice and no padding past the storage's end (a view at the end of its storage, such as the
// second half of every row, otherwise reads a box that overruns it). Empty when it does not fit.
std::optional<Value> read_aligned(Builder& b, Value flat, Value offset, const Layout& L, const Dims& n_sorted) {
  const std::optional<int64_t> at = b.known_int(offset);
  const size_t k = L.box.size();
  if (!at || k < 2) return std::nullopt;
  const int64_t outer = L.box_size / L.box[0];  // elements per outer row: s0
  const int64_t rows = b.dims(flat)[0] / outer;
  Dims whole = L.box, start(k), limit(k);
  whole[0] = rows;
  int64_t rest = *at;
  for (size_t j = 0; j < k; ++j) {
    const int64_t inner = numel(Dims(whole.begin() + j + 1, whole.end()));
    start[j] = rest / inner;
    rest %= inner;
    limit[j] = start[j] + (n_sorted[j] - 1) * L.steps[j] + 1;
    if (limit[j] > whole[j]) return std::nullopt;
  }
  Value base = rows * outer == b.dims(flat)[0] ? flat : b.slice(flat, {0}, {rows * outer}, {1});
  return b.slice(b.reshape(base, whole), start, limit, L.steps);
}

}  // namespace

Value read_strided(Builder& b, Value flat, Value offset, const Dims& sizes, const Dims& strides) {
  const ElementType et = b.dtype(flat);
  if (numel(sizes) == 0) return b.full(TensorType{et, sizes}, 0);
  const Layout L = plan(sizes, strides);
  if (!L.sliceable) {
    return b.gather_flat(flat, element_indices(b, offset, sizes, strides));
  }
  Value v;
  if (L.real.empty()) {
    v = b.dynamic_slice(flat, {offset}, {1});
  } else {
    const Dims n_sorted = sorted_sizes(L, sizes);
    if (std::optional<Value> aligned = read_aligned(b, flat, offset, L, n_sorted)) {
      v = *aligned;
    } else {
      Dims limit(L.box.size());
      for (size_t j = 0; j < L.box.size(); ++j) limit[j] = (n_sorted[j] - 1) * L.steps[j] + 1;
      v = b.slice(read_box(b, flat, offset, L), Dims(L.box.size(), 0), limit, L.steps);
    }
    v = b.transpose(v, inverse(to_sorted_perm(L)));
  }
  // Re-insert size-1 and broadcast (stride-0) dims.
  Dims kept(sizes.size(), 1);
  for (int64_t d : L.real) kept[d] = sizes[d];
  v = b.reshape(v, kept);
  return b.broadcast_in_dim(v, sizes, [&] {
    Dims m(sizes.size());
    std::iota(m.begin(), m.end(), 0);
    return m;
  }());
}

Value write_strided(Builder& b, Value flat, Value offset, const Dims& sizes, const Dims& strides,
                    Value value) {
  const ElementType et = b.dtype(flat);
  if (b.dims(value) != sizes || b.dtype(value) != et) {
    throw std::invalid_argument("write_strided: value " + b.type(value).str() +
                                " does not match the view " + hlo::dims_str(sizes));
  }
  if (numel(sizes) == 0) return flat;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > 1 && strides[i] == 0) {
      throw std::invalid_argument(
          "write_strided: the view has overlapping elements (stride 0); writing to it is "
          "undefined - clone() the tensor first");
    }
  }
  const Layout L = plan(sizes, strides);
  if (!L.sliceable) {
    return b.scatter_flat(flat, element_indices(b, offset, sizes, strides), value);
  }
  const Dims n_sorted = sorted_sizes(L, sizes);
  Value vals = b.transpose(b.reshape(value, [&] {
                             Dims d;
                             for (size_t i = 0; i < sizes.size(); ++i)
                               if (sizes[i] > 1) d.push_back(sizes[i]);
                             return d;
                           }()),
                           to_sorted_perm(L));
  if (L.real.empty()) return b.dynamic_update_slice(flat, b.reshape(value, {1}), {offset});

  Dims high(L.box.size()), interior(L.box.size());
  bool full_box = true;
  for (size_t j = 0; j < L.box.size(); ++j) {
    high[j] = L.box[j] - ((n_sorted[j] - 1) * L.steps[j] + 1);
    interior[j] = L.steps[j] - 1;
    full_box = full_box && high[j] == 0 && interior[j] == 0;
  }
  const Dims zeros(L.box.size(), 0);
  Value new_box = b.pad(vals, b.constant(et, 0), zeros, high, interior);
  if (!full_box) {
    Value all = b.full(TensorType{ElementType::kBool, n_sorted}, 1);
    Value mask = b.pad(all, b.constant(ElementType::kBool, 0), zeros, high, interior);
    new_box = b.select(mask, new_box, read_box(b, flat, offset, L));
  }
  Value seg = b.reshape(new_box, {L.box_size});
  if (L.box_size > L.needed) seg = b.slice(seg, {0}, {L.needed}, {1});
  return b.dynamic_update_slice(flat, seg, {offset});
}

}  // namespace tpu::lowering
