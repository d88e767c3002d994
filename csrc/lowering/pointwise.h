// Table-driven registration of pointwise lowerings: every input (tensors and runtime scalars)
// is broadcast to the common shape first, then the entry computes the result element-wise.
#pragma once

#include <vector>

#include "lowering/registry.h"

namespace tpu::lowering {

using PointwiseFn = hlo::Value (*)(Context& ctx, const std::vector<hlo::Value>& args);

struct PointwiseEntry {
  const char* name;
  PointwiseFn fn;
};

// Registers every entry under its name (call from a static initialiser).
bool register_pointwise(const PointwiseEntry* entries, size_t count);

// Element-wise helpers on values of one shape.
hlo::Value scalar_like(hlo::Builder& b, hlo::Value like, double value);  // full_like
hlo::Value is_nan(hlo::Builder& b, hlo::Value x);
// x rounded toward zero (ceil below zero, floor above); integers and bool unchanged.
hlo::Value trunc_value(hlo::Builder& b, hlo::Value x);
// |x| in x's own type for real x (bool and unsigned x: x itself).
hlo::Value abs_real(hlo::Builder& b, hlo::Value x);
// |x|: real-typed for complex x (stablehlo.abs's result type is the parts' type).
hlo::Value magnitude(hlo::Builder& b, hlo::Value x);
// The parts of complex x (real-typed), and its conjugate; x itself (or zeros) when real.
hlo::Value real_part(hlo::Builder& b, hlo::Value x);
hlo::Value imag_part(hlo::Builder& b, hlo::Value x);
hlo::Value conjugate(hlo::Builder& b, hlo::Value x);
// Where x is finite (both parts for complex x; everywhere for integers).
hlo::Value is_finite(hlo::Builder& b, hlo::Value x);
// log(base^x + base^y) / log(base), stable, with ATen's special cases (equal infinities give x;
// NaN propagates). Complex x and y (base e only): ordered by real part, as ATen's complex
// logaddexp and logcumsumexp order them.
hlo::Value log_add_exp(hlo::Builder& b, hlo::Value x, hlo::Value y, double base = 2.718281828459045);
hlo::Value logical_and(hlo::Builder& b, hlo::Value x, hlo::Value y);
hlo::Value logical_or(hlo::Builder& b, hlo::Value x, hlo::Value y);
hlo::Value logical_not(hlo::Builder& b, hlo::Value x);
// `present` bit i of attrs "present": whether optional argument i of the aten schema was given.
bool has_arg(const Attrs& attrs, int index);

}  // namespace tpu::lowering

#define TPU_REGISTER_POINTWISE(table)                                                        \
  static const bool TPU_LOWERING_CONCAT(tpu_pointwise_registered_, __COUNTER__) =            \
      ::tpu::lowering::register_pointwise(table, sizeof(table) / sizeof(table[0]))
