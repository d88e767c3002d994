#include "hlo/builder.h"

#include <algorithm>
#include <stdexcept>

#include "hlo/literal.h"
#include "hlo/reduce_plan.h"

namespace tpu::hlo {

namespace {

// ", precision_config = [...]" for both operands; nothing for DEFAULT.
std::string precision_config(Precision p) {
  if (p == Precision::kDefault) return "";
  const char* name = p == Precision::kHigh ? "HIGH" : "HIGHEST";
  return std::string(", precision_config = [#stablehlo<precision ") + name + ">, #stablehlo<precision " + name + ">]";
}

[[noreturn]] void fail(const std::string& op, const std::string& why) {
  throw std::invalid_argument("StableHLO builder: " + op + ": " + why);
}

std::string join(const Dims& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

const char* compare_name(Compare c) {
  switch (c) {
    case Compare::kEQ: return "EQ";
    case Compare::kNE: return "NE";
    case Compare::kLT: return "LT";
    case Compare::kLE: return "LE";
    case Compare::kGT: return "GT";
    case Compare::kGE: return "GE";
  }
  return "EQ";
}

const char* reduce_op(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return "stablehlo.add";
    case ReduceKind::kProd: return "stablehlo.multiply";
    case ReduceKind::kMax: return "stablehlo.maximum";
    case ReduceKind::kMin: return "stablehlo.minimum";
    case ReduceKind::kAnd: return "stablehlo.and";
    case ReduceKind::kOr: return "stablehlo.or";
  }
  return "stablehlo.add";
}

}  // namespace

std::string i64_array(const Dims& v) {
  return v.empty() ? "array<i64>" : "array<i64: " + join(v) + ">";
}
std::string i64_list(const Dims& v) { return "[" + join(v) + "]"; }

Builder::Builder() { blocks_.emplace_back(); }

Value Builder::new_value(const TensorType& t) {
  for (int64_t d : t.dims) {
    if (d < 0) fail("value", "negative dimension in " + t.str());
  }
  types_.push_back(t);
  return Value{static_cast<int>(types_.size()) - 1};
}

TensorType Builder::type(Value v) const {
  if (v.id < 0 || v.id >= static_cast<int>(types_.size())) fail("type", "invalid value handle");
  return types_[v.id];
}

void Builder::line(const std::string& text) {
  blocks_.back() += "    " + text + "\n";
}

std::string Builder::operand_list(const std::vector<Value>& vs) const {
  std::string s;
  for (size_t i = 0; i < vs.size(); ++i) s += (i ? ", " : "") + name(vs[i]);
  return s;
}

std::string Builder::type_list(const std::vector<Value>& vs) const {
  std::string s;
  for (size_t i = 0; i < vs.size(); ++i) s += (i ? ", " : "") + type(vs[i]).mlir();
  return s;
}

Value Builder::parameter(const TensorType& t) {
  if (blocks_.size() != 1) fail("parameter", "parameters must be declared outside regions");
  Value v = new_value(t);
  params_.push_back(v);
  param_alias_.push_back(-1);
  return v;
}

void Builder::alias_parameter_to_output(Value param, int output_index) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].id == param.id) {
      param_alias_[i] = output_index;
      return;
    }
  }
  fail("alias_parameter_to_output", "value is not a parameter");
}

std::vector<Value> Builder::emit_multi(const std::string& op, const std::vector<Value>& operands,
                                       const std::vector<TensorType>& results,
                                       const std::string& attributes, const std::string& regions) {
  std::vector<Value> outs;
  std::string lhs;
  std::string result_types;
  for (size_t i = 0; i < results.size(); ++i) {
    outs.push_back(new_value(results[i]));
    lhs += (i ? ", " : "") + name(outs.back());
    result_types += (i ? ", " : "") + results[i].mlir();
  }
  std::string text = lhs + " = \"" + op + "\"(" + operand_list(operands) + ")";
  if (!regions.empty()) text += " (" + regions + ")";
  if (!attributes.empty()) text += " {" + attributes + "}";
  text += " : (" + type_list(operands) + ") -> ";
  text += results.size() == 1 ? result_types : "(" + result_types + ")";
  line(text);
  return outs;
}

Value Builder::emit(const std::string& op, const std::vector<Value>& operands,
                    const TensorType& result, const std::string& attributes,
                    const std::string& regions) {
  return emit_multi(op, operands, {result}, attributes, regions)[0];
}

std::string Builder::region(const std::vector<TensorType>& arg_types,
                            const std::function<std::vector<Value>(const std::vector<Value>&)>& body) {
  std::vector<Value> args;
  std::string header = "{\n    ^bb0(";
  for (size_t i = 0; i < arg_types.size(); ++i) {
    args.push_back(new_value(arg_types[i]));
    header += (i ? ", " : "") + name(args.back()) + ": " + arg_types[i].mlir();
  }
  header += "):\n";
  blocks_.emplace_back();
  std::vector<Value> yielded = body(args);
  line("\"stablehlo.return\"(" + operand_list(yielded) + ") : (" + type_list(yielded) + ") -> ()");
  std::string text = header + blocks_.back() + "  }";
  blocks_.pop_back();
  return text;
}

// ---- constants

namespace {
// "[[a, b], [c, d]]": dense literals must nest like the shape.
std::string nested(const std::vector<std::string>& items, const Dims& dims, size_t dim, size_t& pos) {
  if (dim == dims.size()) return items[pos++];
  std::string s = "[";
  for (int64_t i = 0; i < dims[dim]; ++i) s += (i ? ", " : "") + nested(items, dims, dim + 1, pos);
  return s + "]";
}
std::string dense_body(const std::vector<std::string>& items, const Dims& dims) {
  size_t pos = 0;
  return nested(items, dims, 0, pos);
}
}  // namespace

Value Builder::constant(ElementType t, double value) {
  TensorType tt{t, {}};
  return emit("stablehlo.constant", {}, tt,
              "value = dense<" + float_literal(t, value) + "> : " + tt.mlir());
}

Value Builder::constant_int(ElementType t, int64_t value) {
  TensorType tt{t, {}};
  Value v = emit("stablehlo.constant", {}, tt, "value = dense<" + int_literal(t, value) + "> : " + tt.mlir());
  known_ints_[v.id] = value;
  return v;
}

std::optional<int64_t> Builder::known_int(Value v) const {
  auto it = known_ints_.find(v.id);
  if (it == known_ints_.end()) return std::nullopt;
  return it->second;
}

Value Builder::constant_ints(ElementType t, const Dims& dims, const std::vector<int64_t>& values) {
  TensorType tt{t, dims};
  if (static_cast<int64_t>(values.size()) != tt.numel()) fail("constant_ints", "value count mismatch");
  std::vector<std::string> items;
  for (int64_t v : values) items.push_back(int_literal(t, v));
  return emit("stablehlo.constant", {}, tt, "value = dense<" + dense_body(items, dims) + "> : " + tt.mlir());
}

Value Builder::full(const TensorType& t, double value) {
  return broadcast_in_dim(constant(t.dtype, value), t.dims, {});
}

Value Builder::iota(const TensorType& t, int64_t dim) {
  if (dim < 0 || dim >= t.rank()) fail("iota", "dimension out of range for " + t.str());
  return emit("stablehlo.iota", {}, t, "iota_dimension = " + std::to_string(dim) + " : i64");
}

// ---- elementwise

Value Builder::binary(const char* op, Value a, Value b) {
  if (type(a) != type(b)) {
    fail(op, "operand types differ: " + type(a).str() + " vs " + type(b).str());
  }
  return emit(op, {a, b}, type(a));
}

Value Builder::unary(const char* op, Value a) { return emit(op, {a}, type(a)); }

Value Builder::compare(Value a, Value b, Compare direction) {
  if (type(a) != type(b)) {
    fail("compare", "operand types differ: " + type(a).str() + " vs " + type(b).str());
  }
  // The comparison type is always spelled out: left implicit, XLA's CPU constant folder
  // compared signed integers as unsigned (0 <= -1 came out true for all-size-1 shapes).
  const ElementType t = dtype(a);
  const char* kind = is_floating(t) || is_complex(t) ? "FLOAT"
                     : (is_unsigned(t) || t == ElementType::kBool) ? "UNSIGNED" : "SIGNED";
  return emit("stablehlo.compare", {a, b}, TensorType{ElementType::kBool, dims(a)},
              std::string("comparison_direction = #stablehlo<comparison_direction ") + compare_name(direction) +
                  ">, compare_type = #stablehlo<comparison_type " + kind + ">");
}

Value Builder::select(Value pred, Value on_true, Value on_false) {
  if (dtype(pred) != ElementType::kBool) fail("select", "predicate must be bool");
  if (type(on_true) != type(on_false)) {
    fail("select", "branch types differ: " + type(on_true).str() + " vs " + type(on_false).str());
  }
  if (!type(pred).dims.empty() && dims(pred) != dims(on_true)) {
    fail("select", "predicate shape " + dims_str(dims(pred)) + " differs from " +
                       dims_str(dims(on_true)));
  }
  return emit("stablehlo.select", {pred, on_true, on_false}, type(on_true));
}

Value Builder::clamp(Value lo, Value x, Value hi) {
  return emit("stablehlo.clamp", {lo, x, hi}, type(x));
}

Value Builder::convert(Value v, ElementType t) {
  if (dtype(v) == t) return v;
  if (dtype(v) == ElementType::kBool && is_floating(t)) {
    // As a select of 1 and 0: XLA rewrites x * convert(p) into select(p, x, 0), which turns
    // NaN * False (NaN in IEEE arithmetic, and on the CPU) into 0.
    const TensorType out{t, dims(v)};
    return select(v, full(out, 1.0), full(out, 0.0));
  }
  return emit("stablehlo.convert", {v}, TensorType{t, dims(v)});
}

Value Builder::bitcast_convert(Value v, const TensorType& t) {
  return emit("stablehlo.bitcast_convert", {v}, t);
}

// ---- shapes

Value Builder::reshape(Value v, const Dims& new_dims) {
  if (dims(v) == new_dims) return v;
  TensorType t{dtype(v), new_dims};
  if (t.numel() != type(v).numel()) {
    fail("reshape", "cannot reshape " + type(v).str() + " to " + dims_str(new_dims));
  }
  return emit("stablehlo.reshape", {v}, t);
}

Value Builder::transpose(Value v, const Dims& perm) {
  const Dims& in = dims(v);
  if (perm.size() != in.size()) fail("transpose", "permutation rank mismatch");
  bool identity = true;
  Dims out(in.size());
  std::vector<bool> seen(in.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(in.size()) || seen[perm[i]]) {
      fail("transpose", "invalid permutation " + dims_str(perm));
    }
    seen[perm[i]] = true;
    out[i] = in[perm[i]];
    identity = identity && perm[i] == static_cast<int64_t>(i);
  }
  if (identity) return v;
  return emit("stablehlo.transpose", {v}, TensorType{dtype(v), out},
              "permutation = " + i64_array(perm));
}

Value Builder::broadcast_in_dim(Value v, const Dims& out_dims, const Dims& mapping) {
  const Dims& in = dims(v);
  if (mapping.size() != in.size()) fail("broadcast_in_dim", "mapping rank mismatch");
  for (size_t i = 0; i < in.size(); ++i) {
    if (mapping[i] < 0 || mapping[i] >= static_cast<int64_t>(out_dims.size()) ||
        (in[i] != 1 && in[i] != out_dims[mapping[i]])) {
      fail("broadcast_in_dim", "cannot broadcast " + type(v).str() + " to " + dims_str(out_dims));
    }
  }
  if (in == out_dims) {
    bool identity = true;
    for (size_t i = 0; i < mapping.size(); ++i) identity = identity && mapping[i] == int64_t(i);
    if (identity) return v;
  }
  return emit("stablehlo.broadcast_in_dim", {v}, TensorType{dtype(v), out_dims},
              "broadcast_dimensions = " + i64_array(mapping));
}

Value Builder::broadcast_to(Value v, const Dims& out_dims) {
  const Dims& in = dims(v);
  if (in == out_dims) return v;
  if (in.size() > out_dims.size()) {
    fail("broadcast_to", "cannot broadcast " + type(v).str() + " to " + dims_str(out_dims));
  }
  const size_t lead = out_dims.size() - in.size();
  Dims mapping(in.size());
  for (size_t i = 0; i < in.size(); ++i) mapping[i] = static_cast<int64_t>(lead + i);
  return broadcast_in_dim(v, out_dims, mapping);
}

Value Builder::slice(Value v, const Dims& start, const Dims& limit, const Dims& strides) {
  const Dims& in = dims(v);
  if (start.size() != in.size() || limit.size() != in.size() || strides.size() != in.size()) {
    fail("slice", "index rank mismatch");
  }
  Dims out(in.size());
  bool identity = true;
  for (size_t i = 0; i < in.size(); ++i) {
    if (start[i] < 0 || limit[i] < start[i] || limit[i] > in[i] || strides[i] < 1) {
      fail("slice", "invalid bounds for " + type(v).str());
    }
    out[i] = (limit[i] - start[i] + strides[i] - 1) / strides[i];
    identity = identity && start[i] == 0 && limit[i] == in[i] && strides[i] == 1;
  }
  if (identity) return v;
  return emit("stablehlo.slice", {v}, TensorType{dtype(v), out},
              "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                  ", strides = " + i64_array(strides));
}

Value Builder::dynamic_slice(Value v, const std::vector<Value>& starts, const Dims& sizes) {
  if (starts.size() != dims(v).size() || sizes.size() != dims(v).size()) {
    fail("dynamic_slice", "index rank mismatch");
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || sizes[i] > dims(v)[i]) fail("dynamic_slice", "slice larger than operand");
  }
  std::vector<Value> operands{v};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return emit("stablehlo.dynamic_slice", operands, TensorType{dtype(v), sizes},
              "slice_sizes = " + i64_array(sizes));
}

Value Builder::dynamic_update_slice(Value v, Value update, const std::vector<Value>& starts) {
  if (dtype(v) != dtype(update) || dims(v).size() != dims(update).size() ||
      starts.size() != dims(v).size()) {
    fail("dynamic_update_slice", "operand " + type(v).str() + " and update " + type(update).str() +
                                     " do not match");
  }
  std::vector<Value> operands{v, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return emit("stablehlo.dynamic_update_slice", operands, type(v));
}

Value Builder::pad(Value v, Value pad_value, const Dims& low, const Dims& high, const Dims& interior) {
  const Dims& in = dims(v);
  Dims out(in.size());
  bool identity = true;
  for (size_t i = 0; i < in.size(); ++i) {
    if (interior[i] < 0) fail("pad", "negative interior padding");
    out[i] = low[i] + high[i] + in[i] + (in[i] > 0 ? (in[i] - 1) * interior[i] : 0);
    if (out[i] < 0) fail("pad", "padding makes a negative dimension");
    identity = identity && low[i] == 0 && high[i] == 0 && interior[i] == 0;
  }
  if (identity) return v;
  return emit("stablehlo.pad", {v, pad_value}, TensorType{dtype(v), out},
              "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " + i64_array(high) +
                  ", interior_padding = " + i64_array(interior));
}

Value Builder::concatenate(const std::vector<Value>& values, int64_t dim) {
  if (values.empty()) fail("concatenate", "no operands");
  Dims out = dims(values[0]);
  if (dim < 0 || dim >= static_cast<int64_t>(out.size())) fail("concatenate", "bad dimension");
  out[dim] = 0;
  for (Value v : values) {
    const Dims& d = dims(v);
    if (d.size() != out.size() || dtype(v) != dtype(values[0])) fail("concatenate", "operand mismatch");
    for (size_t i = 0; i < d.size(); ++i) {
      if (static_cast<int64_t>(i) != dim && d[i] != dims(values[0])[i]) {
        fail("concatenate", "operand shapes differ outside the concatenation dimension");
      }
    }
    out[dim] += d[dim];
  }
  if (values.size() == 1) return values[0];
  return emit("stablehlo.concatenate", values, TensorType{dtype(values[0]), out},
              "dimension = " + std::to_string(dim) + " : i64");
}

Value Builder::gather_flat(Value flat, Value indices) {
  if (type(flat).rank() != 1) fail("gather_flat", "operand must be rank 1");
  const int64_t ivd = type(indices).rank();
  return emit("stablehlo.gather", {flat, indices}, TensorType{dtype(flat), dims(indices)},
              "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], "
              "start_index_map = [0], index_vector_dim = " + std::to_string(ivd) +
                  ">, slice_sizes = array<i64: 1>, indices_are_sorted = false");
}

Value Builder::scatter_flat(Value flat, Value indices, Value updates) {
  if (type(flat).rank() != 1) fail("scatter_flat", "operand must be rank 1");
  if (dims(indices) != dims(updates) || dtype(updates) != dtype(flat)) {
    fail("scatter_flat", "indices " + type(indices).str() + " and updates " + type(updates).str() +
                             " do not match");
  }
  const int64_t ivd = type(indices).rank();
  TensorType scalar{dtype(flat), {}};
  std::string body = region({scalar, scalar}, [](const std::vector<Value>& a) {
    return std::vector<Value>{a[1]};
  });
  return emit("stablehlo.scatter", {flat, indices, updates}, type(flat),
              "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], "
              "scatter_dims_to_operand_dims = [0], index_vector_dim = " + std::to_string(ivd) +
                  ">, indices_are_sorted = false, unique_indices = false",
              body);
}

Value Builder::gather(Value operand, Value indices, const GatherDims& g, const Dims& result_dims) {
  // Nothing to read (an empty result, or an empty operand XLA rejects slices of): zeros.
  const TensorType result{dtype(operand), result_dims};
  if (result.numel() == 0 || type(operand).numel() == 0) return full(result, 0);
  std::string attrs = "dimension_numbers = #stablehlo.gather<";
  std::string parts;
  auto add = [&](const char* key, const Dims& v) {
    if (v.empty()) return;
    parts += (parts.empty() ? "" : ", ") + std::string(key) + " = " + i64_list(v);
  };
  add("offset_dims", g.offset_dims);
  add("collapsed_slice_dims", g.collapsed_slice_dims);
  add("start_index_map", g.start_index_map);
  parts += (parts.empty() ? "" : ", ") + std::string("index_vector_dim = ") + std::to_string(g.index_vector_dim);
  attrs += parts + ">, slice_sizes = " + i64_array(g.slice_sizes) + ", indices_are_sorted = false";
  return emit("stablehlo.gather", {operand, indices}, TensorType{dtype(operand), result_dims}, attrs);
}

Value Builder::scatter(Value operand, Value indices, Value updates, const ScatterDims& sd, const char* combine) {
  if (dtype(updates) != dtype(operand)) fail("scatter", "updates must have the operand's element type");
  TensorType scalar{dtype(operand), {}};
  std::string body = region({scalar, scalar}, [&](const std::vector<Value>& a) {
    return std::vector<Value>{combine == nullptr ? a[1] : binary(combine, a[0], a[1])};
  });
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<";
  std::string parts;
  auto add = [&](const char* key, const Dims& v) {
    if (v.empty()) return;
    parts += (parts.empty() ? "" : ", ") + std::string(key) + " = " + i64_list(v);
  };
  add("update_window_dims", sd.update_window_dims);
  add("inserted_window_dims", sd.inserted_window_dims);
  add("scatter_dims_to_operand_dims", sd.scatter_dims_to_operand_dims);
  parts += (parts.empty() ? "" : ", ") + std::string("index_vector_dim = ") + std::to_string(sd.index_vector_dim);
  attrs += parts + ">, indices_are_sorted = false, unique_indices = false";
  return emit("stablehlo.scatter", {operand, indices, updates}, type(operand), attrs, body);
}

Value Builder::reverse(Value v, const Dims& dims_to_reverse) {
  if (dims_to_reverse.empty()) return v;
  return emit("stablehlo.reverse", {v}, type(v), "dimensions = " + i64_array(dims_to_reverse));
}

Value Builder::constant_floats(ElementType t, const Dims& dims, const std::vector<double>& values) {
  TensorType tt{t, dims};
  if (static_cast<int64_t>(values.size()) != tt.numel()) fail("constant_floats", "value count mismatch");
  std::vector<std::string> items;
  for (double v : values) items.push_back(float_literal(t, v));
  return emit("stablehlo.constant", {}, tt, "value = dense<" + dense_body(items, dims) + "> : " + tt.mlir());
}

// ---- contractions and reductions

Value Builder::dot_general(Value lhs, Value rhs, const Dims& lhs_batch, const Dims& rhs_batch,
                           const Dims& lhs_contract, const Dims& rhs_contract, ElementType result,
                           Precision precision) {
  const Dims& l = dims(lhs);
  const Dims& r = dims(rhs);
  if (lhs_batch.size() != rhs_batch.size() || lhs_contract.size() != rhs_contract.size()) {
    fail("dot_general", "dimension list sizes differ");
  }
  Dims out;
  for (size_t i = 0; i < lhs_batch.size(); ++i) {
    if (l.at(lhs_batch[i]) != r.at(rhs_batch[i])) {
      fail("dot_general", "batch dimensions differ: " + type(lhs).str() + " vs " + type(rhs).str());
    }
    out.push_back(l[lhs_batch[i]]);
  }
  for (size_t i = 0; i < lhs_contract.size(); ++i) {
    if (l.at(lhs_contract[i]) != r.at(rhs_contract[i])) {
      fail("dot_general", "contracting dimensions differ: " + type(lhs).str() + " vs " +
                              type(rhs).str());
    }
  }
  auto is_in = [](const Dims& v, int64_t x) {
    for (int64_t e : v) if (e == x) return true;
    return false;
  };
  for (int64_t i = 0; i < static_cast<int64_t>(l.size()); ++i) {
    if (!is_in(lhs_batch, i) && !is_in(lhs_contract, i)) out.push_back(l[i]);
  }
  for (int64_t i = 0; i < static_cast<int64_t>(r.size()); ++i) {
    if (!is_in(rhs_batch, i) && !is_in(rhs_contract, i)) out.push_back(r[i]);
  }
  std::string attrs = "dot_dimension_numbers = #stablehlo.dot<";
  std::string parts;
  auto add_part = [&](const char* key, const Dims& v) {
    if (v.empty()) return;
    parts += (parts.empty() ? "" : ", ") + std::string(key) + " = " + i64_list(v);
  };
  add_part("lhs_batching_dimensions", lhs_batch);
  add_part("rhs_batching_dimensions", rhs_batch);
  add_part("lhs_contracting_dimensions", lhs_contract);
  add_part("rhs_contracting_dimensions", rhs_contract);
  attrs += parts + ">";
  attrs += precision_config(precision);
  return emit("stablehlo.dot_general", {lhs, rhs}, TensorType{result, out}, attrs);
}

Value Builder::reduce(Value v, Value init, const Dims& reduce_dims, ReduceKind kind) {
  const Dims in = dims(v);
  if (type(init).rank() != 0 || dtype(init) != dtype(v)) fail("reduce", "init must be a scalar of the operand type");
  std::vector<bool> reduced(in.size(), false);
  for (int64_t d : reduce_dims) {
    if (d < 0 || d >= static_cast<int64_t>(in.size()) || reduced[d]) fail("reduce", "bad dimensions");
    reduced[d] = true;
  }
  if (reduce_dims.empty()) return v;
  // Staged only for sums (the chain of additions is what is slow and inexact; XLA's max and
  // min reductions are fast as they are).
  const ReducePlan plan = kind == ReduceKind::kSum ? plan_reduce(in, reduce_dims) : ReducePlan{};
  if (!plan.staged) return emit_reduce(v, init, reduce_dims, kind);
  // A run split into blocks: the first stage is a windowed reduction, as XLA would fold a reduce
  // of a reduce over the same run back into one.
  const int64_t block = plan.rows[1];
  Value rows = reshape(v, plan.rows);
  Value first = plan.split ? reduce_window(rows, init, {1, block}, {1, block}, {1, 1}, {{0, 0}, {0, 0}}, kind)
                           : emit_reduce(rows, init, {1}, kind);
  Value r = reshape(first, plan.middle);
  return plan.second.empty() ? r : emit_reduce(r, init, plan.second, kind);
}

// The combining region of reduce/reduce_window for `kind` over elements of type `t`.
std::string Builder::reducer(ElementType t, ReduceKind kind) {
  TensorType scalar{t, {}};
  const char* op = reduce_op(kind);
  return region({scalar, scalar},
                [&](const std::vector<Value>& a) { return std::vector<Value>{binary(op, a[0], a[1])}; });
}

Dims Builder::reduce_result_dims(const Dims& in, const Dims& reduce_dims) {
  Dims out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::find(reduce_dims.begin(), reduce_dims.end(), static_cast<int64_t>(i)) == reduce_dims.end()) {
      out.push_back(in[i]);
    }
  }
  return out;
}

Value Builder::emit_reduce(Value v, Value init, const Dims& reduce_dims, ReduceKind kind) {
  const std::string body = reducer(dtype(v), kind);
  return emit("stablehlo.reduce", {v, init}, TensorType{dtype(v), reduce_result_dims(dims(v), reduce_dims)},
              "dimensions = " + i64_array(reduce_dims), body);
}

std::vector<Value> Builder::reduce_multi(const std::vector<Value>& values, const std::vector<Value>& inits,
                                         const Dims& reduce_dims, const RegionBody& body) {
  if (values.empty() || values.size() != inits.size()) fail("reduce_multi", "values and inits differ in count");
  const Dims in = dims(values[0]);
  std::vector<bool> reduced(in.size(), false);
  for (int64_t d : reduce_dims) {
    if (d < 0 || d >= static_cast<int64_t>(in.size()) || reduced[d]) fail("reduce_multi", "bad dimensions");
    reduced[d] = true;
  }
  Dims out;
  for (size_t i = 0; i < in.size(); ++i) if (!reduced[i]) out.push_back(in[i]);
  std::vector<TensorType> scalars, results;
  for (Value v : values) {
    if (dims(v) != in) fail("reduce_multi", "values differ in shape");
    scalars.push_back(TensorType{dtype(v), {}});
    results.push_back(TensorType{dtype(v), out});
  }
  std::vector<TensorType> arg_types = scalars;
  arg_types.insert(arg_types.end(), scalars.begin(), scalars.end());
  std::string body_text = region(arg_types, body);
  std::vector<Value> operands = values;
  operands.insert(operands.end(), inits.begin(), inits.end());
  return emit_multi("stablehlo.reduce", operands, results, "dimensions = " + i64_array(reduce_dims), body_text);
}

namespace {
std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>>& padding) {
  std::string s = "dense<[";
  for (size_t i = 0; i < padding.size(); ++i) {
    s += (i ? ", [" : "[") + std::to_string(padding[i].first) + ", " + std::to_string(padding[i].second) + "]";
  }
  return s + "]> : tensor<" + std::to_string(padding.size()) + "x2xi64>";
}

Dims window_output(const Dims& in, const Dims& window, const Dims& strides, const Dims& dilations,
                   const std::vector<std::pair<int64_t, int64_t>>& padding) {
  Dims out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const int64_t padded = in[i] + padding[i].first + padding[i].second;
    const int64_t span = (window[i] - 1) * dilations[i] + 1;
    out[i] = padded < span ? 0 : (padded - span) / strides[i] + 1;
  }
  return out;
}
}  // namespace

Value Builder::reduce_window(Value v, Value init, const Dims& window, const Dims& strides,
                             const Dims& window_dilations,
                             const std::vector<std::pair<int64_t, int64_t>>& padding, ReduceKind kind) {
  const Dims in = dims(v);
  if (window.size() != in.size() || strides.size() != in.size() || window_dilations.size() != in.size() ||
      padding.size() != in.size()) {
    fail("reduce_window", "window rank mismatch");
  }
  const std::string body = reducer(dtype(v), kind);
  const Dims out = window_output(in, window, strides, window_dilations, padding);
  return emit("stablehlo.reduce_window", {v, init}, TensorType{dtype(v), out},
              "window_dimensions = " + i64_array(window) + ", window_strides = " + i64_array(strides) +
                  ", window_dilations = " + i64_array(window_dilations) + ", padding = " + padding_attr(padding),
              body);
}

std::vector<Value> Builder::reduce_window_multi(const std::vector<Value>& values, const std::vector<Value>& inits,
                                                const Dims& window, const Dims& strides, const Dims& window_dilations,
                                                const std::vector<std::pair<int64_t, int64_t>>& padding,
                                                const RegionBody& body) {
  const Dims in = dims(values[0]);
  std::vector<TensorType> scalars, results;
  const Dims out = window_output(in, window, strides, window_dilations, padding);
  for (Value v : values) {
    scalars.push_back(TensorType{dtype(v), {}});
    results.push_back(TensorType{dtype(v), out});
  }
  std::vector<TensorType> arg_types = scalars;
  arg_types.insert(arg_types.end(), scalars.begin(), scalars.end());
  std::string body_text = region(arg_types, body);
  std::vector<Value> operands = values;
  operands.insert(operands.end(), inits.begin(), inits.end());
  return emit_multi("stablehlo.reduce_window", operands, results,
                    "window_dimensions = " + i64_array(window) + ", window_strides = " + i64_array(strides) +
                        ", window_dilations = " + i64_array(window_dilations) + ", padding = " + padding_attr(padding),
                    body_text);
}

std::vector<Value> Builder::sort(const std::vector<Value>& values, int64_t dim, bool stable, const RegionBody& less) {
  std::vector<TensorType> args, results;
  for (Value v : values) {
    args.push_back(TensorType{dtype(v), {}});
    args.push_back(TensorType{dtype(v), {}});
    results.push_back(type(v));
  }
  std::string body = region(args, less);
  return emit_multi("stablehlo.sort", values, results,
                    "dimension = " + std::to_string(dim) + " : i64, is_stable = " + (stable ? "true" : "false"),
                    body);
}

std::vector<Value> Builder::while_loop(const std::vector<Value>& init, const RegionBody& cond, const RegionBody& body) {
  std::vector<TensorType> types;
  for (Value v : init) types.push_back(type(v));
  std::string cond_text = region(types, cond);
  std::string body_text = region(types, body);
  return emit_multi("stablehlo.while", init, types, "", cond_text + ", " + body_text);
}

std::vector<Value> Builder::if_else(Value pred, const std::vector<TensorType>& results, const RegionBody& then_body,
                                    const RegionBody& else_body) {
  if (type(pred) != TensorType{ElementType::kBool, {}}) fail("if", "predicate must be a rank-0 bool");
  std::string then_text = region({}, then_body);
  std::string else_text = region({}, else_body);
  return emit_multi("stablehlo.if", {pred}, results, "", then_text + ", " + else_text);
}

Dims Builder::convolution_dims(const Dims& in, const Dims& k, const Dims& strides,
                               const std::vector<std::pair<int64_t, int64_t>>& padding, const Dims& lhs_dilation,
                               const Dims& rhs_dilation, int64_t batch_groups) {
  Dims out{in[0] / batch_groups, k[0]};
  for (size_t i = 0; i + 2 < in.size(); ++i) {
    const int64_t dilated_in = in[2 + i] == 0 ? 0 : (in[2 + i] - 1) * lhs_dilation[i] + 1;
    const int64_t padded = dilated_in + padding[i].first + padding[i].second;
    const int64_t span = (k[2 + i] - 1) * rhs_dilation[i] + 1;
    out.push_back(padded < span ? 0 : (padded - span) / strides[i] + 1);
  }
  return out;
}

Value Builder::convolution(Value input, Value kernel, const Dims& strides,
                           const std::vector<std::pair<int64_t, int64_t>>& padding, const Dims& lhs_dilation,
                           const Dims& rhs_dilation, int64_t feature_groups, int64_t batch_groups,
                           ElementType result, Precision precision) {
  const Dims in = dims(input);
  const Dims k = dims(kernel);
  const size_t spatial = in.size() - 2;
  if (k.size() != in.size() || strides.size() != spatial || padding.size() != spatial ||
      lhs_dilation.size() != spatial || rhs_dilation.size() != spatial) {
    fail("convolution", "rank mismatch between input " + type(input).str() + " and kernel " + type(kernel).str());
  }
  const Dims out = convolution_dims(in, k, strides, padding, lhs_dilation, rhs_dilation, batch_groups);
  std::string layout = "[b, f";
  std::string kernel_layout = "[o, i";
  std::string spatial_names;
  for (size_t i = 0; i < spatial; ++i) spatial_names += ", " + std::to_string(i);
  layout += spatial_names + "]";
  kernel_layout += spatial_names + "]";
  std::string pad = "[";
  for (size_t i = 0; i < spatial; ++i) {
    pad += (i ? ", [" : "[") + std::to_string(padding[i].first) + ", " + std::to_string(padding[i].second) + "]";
  }
  pad += "]";
  std::string attrs = "dimension_numbers = #stablehlo.conv<" + layout + "x" + kernel_layout + "->" + layout + ">";
  attrs += ", window_strides = " + i64_array(strides);
  attrs += ", padding = dense<" + (spatial ? pad : std::string("[]")) + "> : tensor<" + std::to_string(spatial) + "x2xi64>";
  attrs += ", lhs_dilation = " + i64_array(lhs_dilation) + ", rhs_dilation = " + i64_array(rhs_dilation);
  attrs += ", feature_group_count = " + std::to_string(feature_groups) + " : i64";
  attrs += ", batch_group_count = " + std::to_string(batch_groups) + " : i64";
  attrs += precision_config(precision);
  return emit("stablehlo.convolution", {input, kernel}, TensorType{result, out}, attrs);
}

std::pair<Value, Value> Builder::rng_bit_generator(Value state, const TensorType& bits_type) {
  if (type(state) != TensorType{ElementType::kU64, {2}}) fail("rng_bit_generator", "state must be ui64[2]");
  auto outs = emit_multi("stablehlo.rng_bit_generator", {state}, {type(state), bits_type},
                         "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>");
  return {outs[0], outs[1]};
}

std::string Builder::module_text(const std::vector<Value>& outputs) const {
  std::string text = "module @torch_tpu attributes {mhlo.num_partitions = 1 : i32, "
                     "mhlo.num_replicas = " + std::to_string(num_replicas_) + " : i32} {\n  func.func public @main(";
  for (size_t i = 0; i < params_.size(); ++i) {
    text += (i ? ", " : "") + name(params_[i]) + ": " + type(params_[i]).mlir();
    if (param_alias_[i] >= 0) {
      text += " {tf.aliasing_output = " + std::to_string(param_alias_[i]) + " : i32}";
    }
  }
  text += ") -> (" + type_list(outputs) + ") {\n";
  text += blocks_[0];
  text += "    \"func.return\"(" + operand_list(outputs) + ") : (" + type_list(outputs) + ") -> ()\n";
  text += "  }\n";
  for (const auto& f : functions_) text += f.second + "\n";
  text += "}\n";
  return text;
}

void Builder::add_function(const std::string& symbol, const std::string& text) {
  for (const auto& f : functions_) {
    if (f.first == symbol) return;
  }
  functions_.emplace_back(symbol, text);
}

}  // namespace tpu::hlo
