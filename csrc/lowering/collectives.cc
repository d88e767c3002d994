// Collectives across the replicas of one program (exec/replica_group.h): each program runs once
// on every device of a group, one replica each, and these ops exchange data between them.
//
// Every lowering here is shape-uniform: its text depends only on the group size, the dtype, the
// shape and the attributes - never on which rank runs it - because every rank must run the same
// program for its collectives to meet. Anything rank-specific (uneven all_to_all splits, a root's
// data, writing into views) is done by ordinary ops before and after.
//
// Attributes: group_size (replicas), combine (CollectiveCombine), mean (divide the sum by the group
// size), premul (the last input is a scalar every input is multiplied by first), pairs (flattened
// [source, target] replica pairs of collective_permute), root (all_reduce: only that replica takes
// the result, the others keep their input - c10d's reduce; broadcast_bits: see there).
#include "lowering/collectives.h"

#include <optional>
#include <stdexcept>
#include <string>

#include "lowering/hlo_names.h"
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

// Above this size an all-reduce goes as reduce-scatter + all-gather.
constexpr int64_t kLargeBytes = int64_t{16} << 20;

std::string replica_groups(int64_t n) {
  std::string s = "replica_groups = dense<[[";
  for (int64_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(i);
  return s + "]]> : tensor<1x" + std::to_string(n) + "xi64>";
}

const char* combine_op(CollectiveCombine c, ElementType t) {
  if (t == ElementType::kBool) {
    // Booleans: sums and maxima are "any", products and minima are "all" (as on the CPU).
    switch (c) {
      case CollectiveCombine::kSum: case CollectiveCombine::kMax: case CollectiveCombine::kOr:
        return "stablehlo.or";
      case CollectiveCombine::kXor: return "stablehlo.xor";
      default: return "stablehlo.and";
    }
  }
  switch (c) {
    case CollectiveCombine::kSum: return "stablehlo.add";
    case CollectiveCombine::kProd: return "stablehlo.multiply";
    case CollectiveCombine::kMax: return "stablehlo.maximum";
    case CollectiveCombine::kMin: return "stablehlo.minimum";
    case CollectiveCombine::kAnd: return "stablehlo.and";
    case CollectiveCombine::kOr: return "stablehlo.or";
    case CollectiveCombine::kXor: return "stablehlo.xor";
  }
  return "stablehlo.add";
}

std::string combine_region(Builder& b, CollectiveCombine c, ElementType t) {
  const TensorType scalar{t, {}};
  const char* op = combine_op(c, t);
  return b.region({scalar, scalar}, [&](const std::vector<Value>& a) {
    return std::vector<Value>{b.binary(op, a[0], a[1])};
  });
}

// The inputs scaled by the premul factor (the last input) when asked; the factor is dropped.
std::vector<Value> premultiplied(Context& ctx, const std::vector<Value>& in) {
  if (!ctx.attrs.get_bool("premul", false)) return in;
  Builder& b = ctx.b;
  const Value factor = in.back();
  std::vector<Value> out;
  for (size_t i = 0; i + 1 < in.size(); ++i) {
    out.push_back(b.mul(in[i], b.broadcast_to(b.convert(factor, b.dtype(in[i])), b.dims(in[i]))));
  }
  return out;
}

Value divided_by_group(Context& ctx, Value v) {
  Builder& b = ctx.b;
  if (!ctx.attrs.get_bool("mean", false)) return v;
  const Value n = b.full(b.type(v), static_cast<double>(ctx.attrs.get_int("group_size")));
  return b.div(v, n);
}

// Whether this replica is `root` (stablehlo.replica_id): the same program on every rank, each
// learning its own part when it runs.
Value is_replica(Builder& b, int64_t root) {
  const Value id = b.emit("stablehlo.replica_id", {}, TensorType{ElementType::kU32, {}});
  return b.compare(id, b.constant_int(ElementType::kU32, root), Compare::kEQ);
}

CollectiveCombine combine_of(const Attrs& attrs) {
  return static_cast<CollectiveCombine>(attrs.get_int("combine", 0));
}

// Whether the plugin's all_reduce can combine with `c` directly. XLA:CPU takes only arithmetic
// combiners (add, multiply, maximum, minimum); bitwise ones and booleans go by an exchange of the
// values and a local reduction over the group (the same bits either way).
bool combines_natively(CollectiveCombine c, ElementType t) {
  if (t == ElementType::kBool) return false;
  return c == CollectiveCombine::kSum || c == CollectiveCombine::kProd || c == CollectiveCombine::kMax ||
         c == CollectiveCombine::kMin;
}

// [n, m] -> [m]: the n rows combined with `c` in rank order (the first row is the start value,
// so no identity element is needed).
Value reduce_rows(Builder& b, Value rows, CollectiveCombine c) {
  const TensorType t = b.type(rows);
  const char* op = combine_op(c, t.dtype);
  auto row = [&](int64_t r) { return b.reshape(b.slice(rows, {r, 0}, {r + 1, t.dims[1]}, {1, 1}), {t.dims[1]}); };
  Value acc = row(0);
  for (int64_t r = 1; r < t.dims[0]; ++r) acc = b.binary(op, acc, row(r));
  return acc;
}

Value all_gather_flat(Builder& b, Value flat, int64_t n) {
  const TensorType t = b.type(flat);
  return b.emit("stablehlo.all_gather", {flat}, TensorType{t.dtype, {n * t.numel()}},
                "all_gather_dim = 0 : i64, " + replica_groups(n));
}

Value all_to_all_flat(Builder& b, Value flat, int64_t n) {
  const TensorType t = b.type(flat);
  return b.emit("stablehlo.all_to_all", {flat}, t,
                "split_dimension = 0 : i64, concat_dimension = 0 : i64, split_count = " +
                    std::to_string(n) + " : i64, " + replica_groups(n));
}

// all_reduce: every input reduced elementwise across the group (same shape out; with "root", only
// on that replica).
std::vector<Value> lower_all_reduce(Context& ctx, const std::vector<Value>& raw) {
  Builder& b = ctx.b;
  const int64_t n = ctx.attrs.get_int("group_size");
  std::vector<Value> out;
  const CollectiveCombine c = combine_of(ctx.attrs);
  const int64_t root = ctx.attrs.get_int("root", -1);
  const std::optional<Value> is_root = root >= 0 ? std::optional<Value>(is_replica(b, root)) : std::nullopt;
  const std::vector<Value> in = premultiplied(ctx, raw);
  for (size_t i = 0; i < in.size(); ++i) {
    const Value v = in[i];
    const TensorType t = b.type(v);
    Value r;
    const int64_t bytes = t.numel() * static_cast<int64_t>(element_size(t.dtype));
    if (combines_natively(c, t.dtype) && n > 1 && t.numel() % n == 0 && bytes > kLargeBytes) {
      // Large tensors: a reduce-scatter then an all-gather, so each device reduces only its
      // share (XLA:CPU's one-step all-reduce of 64 MB runs at half this speed).
      Value flat = b.reshape(v, {t.numel()});
      Value part = b.emit("stablehlo.reduce_scatter", {flat}, TensorType{t.dtype, {t.numel() / n}},
                          "scatter_dimension = 0 : i64, " + replica_groups(n), combine_region(b, c, t.dtype));
      r = b.reshape(all_gather_flat(b, part, n), t.dims);
    } else if (combines_natively(c, t.dtype)) {
      r = b.emit("stablehlo.all_reduce", {v}, t, replica_groups(n), combine_region(b, c, t.dtype));
    } else {
      Value rows = b.reshape(all_gather_flat(b, b.reshape(v, {t.numel()}), n), {n, t.numel()});
      r = b.reshape(reduce_rows(b, rows, c), t.dims);
    }
    r = divided_by_group(ctx, r);
    out.push_back(is_root ? b.select(b.broadcast_to(*is_root, t.dims), r, raw[i]) : r);
  }
  return out;
}

// all_gather: every input flattened, the group's copies concatenated in rank order ([n * numel]).
std::vector<Value> lower_all_gather(Context& ctx, const std::vector<Value>& in) {
  Builder& b = ctx.b;
  const int64_t n = ctx.attrs.get_int("group_size");
  std::vector<Value> out;
  for (Value v : in) out.push_back(all_gather_flat(b, b.reshape(v, {b.type(v).numel()}), n));
  return out;
}

// reduce_scatter: every input flattened ([n * m]) and reduced across the group; rank r keeps
// elements [r * m, (r + 1) * m).
std::vector<Value> lower_reduce_scatter(Context& ctx, const std::vector<Value>& raw) {
  Builder& b = ctx.b;
  const int64_t n = ctx.attrs.get_int("group_size");
  std::vector<Value> out;
  for (Value v : premultiplied(ctx, raw)) {
    const TensorType t = b.type(v);
    if (t.numel() % n != 0) {
      throw std::invalid_argument("reduce_scatter: " + t.str() + " does not split into " +
                                  std::to_string(n) + " equal parts");
    }
    Value flat = b.reshape(v, {t.numel()});
    const CollectiveCombine c = combine_of(ctx.attrs);
    Value r;
    if (combines_natively(c, t.dtype)) {
      r = b.emit("stablehlo.reduce_scatter", {flat}, TensorType{t.dtype, {t.numel() / n}},
                 "scatter_dimension = 0 : i64, " + replica_groups(n), combine_region(b, c, t.dtype));
    } else {
      // Every rank's part for this rank arrives as one row; reduce the rows here.
      r = reduce_rows(b, b.reshape(all_to_all_flat(b, flat, n), {n, t.numel() / n}), c);
    }
    out.push_back(divided_by_group(ctx, r));
  }
  return out;
}

// all_to_all: the input flattened into n equal chunks; chunk j goes to rank j, and the output's
// chunk i is what rank i sent here.
std::vector<Value> lower_all_to_all(Context& ctx, const std::vector<Value>& in) {
  Builder& b = ctx.b;
  const int64_t n = ctx.attrs.get_int("group_size");
  const TensorType t = b.type(in[0]);
  if (t.numel() % n != 0) {
    throw std::invalid_argument("all_to_all: " + t.str() + " does not split into " +
                                std::to_string(n) + " equal chunks");
  }
  return {all_to_all_flat(b, b.reshape(in[0], {t.numel()}), n)};
}

// collective_permute: the input of each pair's source replica arrives at its target; replicas
// that are no target get zeros.
std::vector<Value> lower_collective_permute(Context& ctx, const std::vector<Value>& in) {
  Builder& b = ctx.b;
  const Dims& pairs = ctx.attrs.get_ints("pairs");
  std::string text = "source_target_pairs = dense<[";
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    text += (i ? ", [" : "[") + std::to_string(pairs[i]) + ", " + std::to_string(pairs[i + 1]) + "]";
  }
  text += "]> : tensor<" + std::to_string(pairs.size() / 2) + "x2xi64>";
  return {b.emit("stablehlo.collective_permute", {in[0]}, b.type(in[0]), text)};
}

// broadcast_bits: every rank but the root contributes zeros; summing the raw bits as integers
// across the group (zeros added to a pattern leave it as it is) gives every rank the root's exact
// bits (NaN payloads and -0.0 included), for plugins without a collective_broadcast (XLA:CPU has
// none). With a "root" attribute every rank passes its own data and the program zeroes it on the
// other replicas (stablehlo.replica_id): the same program, and the same ops around it, on every
// rank - which a collective recorded into a larger program needs.
std::vector<Value> lower_broadcast_bits(Context& ctx, const std::vector<Value>& in) {
  Builder& b = ctx.b;
  const int64_t n = ctx.attrs.get_int("group_size");
  const int64_t root = ctx.attrs.get_int("root", -1);
  const std::optional<Value> is_root = root >= 0 ? std::optional<Value>(is_replica(b, root)) : std::nullopt;
  std::vector<Value> out;
  for (Value v : in) {
    const TensorType t = b.type(v);
    ElementType bits = ElementType::kI8;  // an integer of the same width
    switch (element_size(t.dtype)) {
      case 2: bits = ElementType::kI16; break;
      case 4: bits = ElementType::kI32; break;
      case 8: bits = ElementType::kI64; break;
      default: bits = ElementType::kI8; break;
    }
    const TensorType bt{bits, t.dims};
    Value raw = t.dtype == ElementType::kBool ? b.convert(v, bits) : b.bitcast_convert(v, bt);
    if (is_root) raw = b.select(b.broadcast_to(*is_root, bt.dims), raw, b.full(bt, 0));
    Value r = b.emit("stablehlo.all_reduce", {raw}, bt, replica_groups(n),
                     combine_region(b, CollectiveCombine::kSum, bits));
    out.push_back(t.dtype == ElementType::kBool ? b.convert(r, ElementType::kBool)
                                                : b.bitcast_convert(r, t));
  }
  return out;
}

const LoweringEntry kCollectives[] = {
    {"all_reduce", lower_all_reduce},
    {"all_gather", lower_all_gather},
    {"reduce_scatter", lower_reduce_scatter},
    {"all_to_all", lower_all_to_all},
    {"collective_permute", lower_collective_permute},
    {"broadcast_bits", lower_broadcast_bits},
};
TPU_REGISTER_LOWERINGS(kCollectives);

}  // namespace
}  // namespace tpu::lowering
