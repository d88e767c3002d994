// A small typed builder that prints one StableHLO function (and its module) as MLIR text.
//
// Every op method checks its operand types and computes the result type, so a lowering that
// gets a shape wrong fails here with a readable message instead of inside the XLA compiler.
// Ops are printed in MLIR's generic form ("stablehlo.add"(...) : (...) -> ...).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hlo/tensor_type.h"

namespace tpu::hlo {

// Handle of an SSA value inside one Builder.
struct Value {
  int id = -1;
  bool valid() const { return id >= 0; }
};

enum class Compare { kEQ, kNE, kLT, kLE, kGT, kGE };
enum class ReduceKind { kSum, kProd, kMax, kMin, kAnd, kOr };
// StableHLO's precision config of dot_general / convolution operands (DEFAULT: none written).
enum class Precision { kDefault = 0, kHigh = 1, kHighest = 2 };

class Builder {
 public:
  Builder();

  // Function parameters, in call order.
  Value parameter(const TensorType& type);
  // Declares that `param` may be donated to produce output number `output_index`.
  void alias_parameter_to_output(Value param, int output_index);
  // By value: references into the builder's table would dangle when it grows.
  TensorType type(Value v) const;
  Dims dims(Value v) const { return type(v).dims; }
  ElementType dtype(Value v) const { return type(v).dtype; }

  // ---- generic emission (for ops without a helper below)
  Value emit(const std::string& op, const std::vector<Value>& operands, const TensorType& result,
             const std::string& attributes = "", const std::string& regions = "");
  std::vector<Value> emit_multi(const std::string& op, const std::vector<Value>& operands,
                                const std::vector<TensorType>& results,
                                const std::string& attributes = "", const std::string& regions = "");
  // Builds a region whose block takes `arg_types`; `body` emits ops and returns the values to
  // yield. Returns the region text for emit(..., regions).
  std::string region(const std::vector<TensorType>& arg_types,
                     const std::function<std::vector<Value>(const std::vector<Value>&)>& body);

  // ---- constants
  Value constant(ElementType t, double value);        // rank-0
  Value constant_int(ElementType t, int64_t value);   // rank-0
  // The value of a rank-0 integer made by constant_int (baked offsets, for example); empty for
  // anything else, including values only known when the program runs.
  std::optional<int64_t> known_int(Value v) const;
  Value constant_ints(ElementType t, const Dims& dims, const std::vector<int64_t>& values);
  Value full(const TensorType& t, double value);      // broadcast constant
  Value iota(const TensorType& t, int64_t dim);

  // ---- elementwise: operands must have identical types (see broadcast_to / convert)
  Value binary(const char* op, Value a, Value b);   // e.g. "stablehlo.add"
  Value unary(const char* op, Value a);             // e.g. "stablehlo.negate"
  Value add(Value a, Value b) { return binary("stablehlo.add", a, b); }
  Value sub(Value a, Value b) { return binary("stablehlo.subtract", a, b); }
  Value mul(Value a, Value b) { return binary("stablehlo.multiply", a, b); }
  Value div(Value a, Value b) { return binary("stablehlo.divide", a, b); }
  Value max(Value a, Value b) { return binary("stablehlo.maximum", a, b); }
  Value min(Value a, Value b) { return binary("stablehlo.minimum", a, b); }
  Value neg(Value a) { return unary("stablehlo.negate", a); }
  Value compare(Value a, Value b, Compare direction);  // -> bool
  Value select(Value pred, Value on_true, Value on_false);
  Value clamp(Value lo, Value x, Value hi);
  Value convert(Value v, ElementType t);               // identity when already `t`
  Value bitcast_convert(Value v, const TensorType& t);

  // ---- shapes
  Value reshape(Value v, const Dims& dims);            // identity when unchanged
  Value transpose(Value v, const Dims& permutation);   // identity when trivial
  Value broadcast_in_dim(Value v, const Dims& out_dims, const Dims& mapping);
  Value broadcast_to(Value v, const Dims& out_dims);   // numpy rules, right-aligned
  Value slice(Value v, const Dims& start, const Dims& limit, const Dims& strides);
  Value dynamic_slice(Value v, const std::vector<Value>& starts, const Dims& sizes);
  Value dynamic_update_slice(Value v, Value update, const std::vector<Value>& starts);
  Value pad(Value v, Value pad_value, const Dims& low, const Dims& high, const Dims& interior);
  Value concatenate(const std::vector<Value>& values, int64_t dim);
  // General stablehlo.gather / stablehlo.scatter (see the StableHLO spec for the dimension
  // numbers). The scatter combines updates with `combine` (nullptr: replace).
  struct GatherDims {
    Dims offset_dims, collapsed_slice_dims, start_index_map;
    int64_t index_vector_dim = 0;
    Dims slice_sizes;
  };
  Value gather(Value operand, Value indices, const GatherDims& dims, const Dims& result_dims);
  struct ScatterDims {
    Dims update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims;
    int64_t index_vector_dim = 0;
  };
  Value scatter(Value operand, Value indices, Value updates, const ScatterDims& dims, const char* combine);
  Value reverse(Value v, const Dims& dims);
  // A dense constant of any shape from double values (converted to `t`).
  Value constant_floats(ElementType t, const Dims& dims, const std::vector<double>& values);
  // Element-wise gather from a rank-1 operand: result[i...] = flat[indices[i...]].
  Value gather_flat(Value flat, Value indices);
  // Element-wise scatter into a rank-1 operand: flat[indices[i...]] = updates[i...].
  Value scatter_flat(Value flat, Value indices, Value updates);

  // ---- contractions and reductions
  Value dot_general(Value lhs, Value rhs, const Dims& lhs_batch, const Dims& rhs_batch,
                    const Dims& lhs_contract, const Dims& rhs_contract, ElementType result,
                    Precision precision);
  Value dot_general(Value lhs, Value rhs, const Dims& lhs_batch, const Dims& rhs_batch,
                    const Dims& lhs_contract, const Dims& rhs_contract, ElementType result,
                    bool highest_precision) {
    return dot_general(lhs, rhs, lhs_batch, rhs_batch, lhs_contract, rhs_contract, result,
                       highest_precision ? Precision::kHighest : Precision::kDefault);
  }
  // Emitted as one reduce or, for long trailing runs of reduced dimensions, in two stages of the
  // same result (hlo/reduce_plan.h).
  Value reduce(Value v, Value init, const Dims& dims, ReduceKind kind);
  // The shape of a reduction's result: `in` without `reduce_dims`.
  static Dims reduce_result_dims(const Dims& in, const Dims& reduce_dims);
  // Variadic reduce: `values` (same shape) reduced together with `inits`; `body` receives the
  // accumulators then the elements (rank-0) and returns the new accumulators.
  using RegionBody = std::function<std::vector<Value>(const std::vector<Value>&)>;
  std::vector<Value> reduce_multi(const std::vector<Value>& values, const std::vector<Value>& inits,
                                  const Dims& dims, const RegionBody& body);
  // Windowed reduction (pooling, cumulative sums). `padding` is (low, high) per dimension.
  Value reduce_window(Value v, Value init, const Dims& window, const Dims& strides,
                      const Dims& window_dilations, const std::vector<std::pair<int64_t, int64_t>>& padding,
                      ReduceKind kind);
  std::vector<Value> reduce_window_multi(const std::vector<Value>& values, const std::vector<Value>& inits,
                                         const Dims& window, const Dims& strides, const Dims& window_dilations,
                                         const std::vector<std::pair<int64_t, int64_t>>& padding,
                                         const RegionBody& body);
  // Sorts `values` (same shape) along `dim`; `less` receives (a0, b0, a1, b1, ...) rank-0
  // pairs and returns a bool: whether a sorts before b.
  std::vector<Value> sort(const std::vector<Value>& values, int64_t dim, bool stable, const RegionBody& less);
  // stablehlo.while: `cond` maps the loop values to a rank-0 bool, `body` to the next values.
  std::vector<Value> while_loop(const std::vector<Value>& init, const RegionBody& cond, const RegionBody& body);
  // stablehlo.if: runs `then_body` or `else_body` (no arguments; both return `results`-typed
  // values) depending on the rank-0 bool `pred`.
  std::vector<Value> if_else(Value pred, const std::vector<TensorType>& results, const RegionBody& then_body,
                             const RegionBody& else_body);
  // The result dims of that convolution of an input of dims `in` by a kernel of dims `k`.
  static Dims convolution_dims(const Dims& in, const Dims& k, const Dims& strides,
                               const std::vector<std::pair<int64_t, int64_t>>& padding, const Dims& lhs_dilation,
                               const Dims& rhs_dilation, int64_t batch_groups);
  // stablehlo.convolution with PyTorch's NCHW / OIHW layout for `spatial` spatial dims.
  Value convolution(Value input, Value kernel, const Dims& strides,
                    const std::vector<std::pair<int64_t, int64_t>>& padding, const Dims& lhs_dilation,
                    const Dims& rhs_dilation, int64_t feature_groups, int64_t batch_groups,
                    ElementType result, Precision precision);

  // ---- random bits: (new_state, bits) from a THREE_FRY state of type ui64[2]
  std::pair<Value, Value> rng_bit_generator(Value state, const TensorType& bits_type);

  // Adds a module-level function (custom kernels: a JAX/StableHLO function called with
  // func.call). `text` is its full MLIR; a symbol already added is kept as it is.
  void add_function(const std::string& symbol, const std::string& text);
  // The whole module with a public @main returning `outputs` (then the added functions).
  std::string module_text(const std::vector<Value>& outputs) const;
  // Collective programs: the module runs as `n` replicas (one per device of a group).
  void set_num_replicas(int64_t n) { num_replicas_ = n; }

 private:
  // One stablehlo.reduce (reduce() picks between it and a staged form, hlo/reduce_plan.h).
  Value emit_reduce(Value v, Value init, const Dims& dims, ReduceKind kind);
  std::string reducer(ElementType t, ReduceKind kind);
  Value new_value(const TensorType& t);
  std::string name(Value v) const { return "%" + std::to_string(v.id); }
  std::string operand_list(const std::vector<Value>& vs) const;
  std::string type_list(const std::vector<Value>& vs) const;
  void line(const std::string& text);

  std::vector<TensorType> types_;
  std::map<int, int64_t> known_ints_;  // value id -> constant_int's value
  std::vector<Value> params_;
  std::vector<int> param_alias_;  // output index per parameter, -1 if none
  std::vector<std::string> blocks_;  // stack: [0] is the function body
  int64_t num_replicas_ = 1;
  std::vector<std::pair<std::string, std::string>> functions_;  // (symbol, text), in order added
};

// Printing helpers shared with callers that build attributes by hand.
std::string i64_array(const Dims& v);    // "array<i64: 1, 2>"
std::string i64_list(const Dims& v);     // "[1, 2]"

}  // namespace tpu::hlo
