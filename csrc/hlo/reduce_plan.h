// How a sum is emitted: as one stablehlo.reduce, or in two stages that XLA's CPU compiler turns
// into fast code (Builder::reduce stages sums only: XLA's max and min reductions are fast as they
// are, and the result of a staged sum differs from one chain's only in rounding).
//
// XLA:CPU runs a reduce whose operand is fused into it (sum(x * x), a loss, per-channel
// statistics) as a scalar loop per output element: one long chain of dependent additions,
// ~1 ns an element on 2 cores, and the chain's rounding error grows with its length. A rank-2
// row reduction [rows, block] it compiles into its fast (vectorised, tree-shaped) form. So a
// sum whose reduced dimensions end the shape is emitted as
//   reshape to [rows, block] -> reduce the block -> reshape -> reduce what is left
// (a run split into blocks reduces them with a windowed reduction, which XLA does not fold back)
// when that run of trailing dimensions is long (measured on the XLA CPU plugin, 2026-12-05: a
// full sum of x*x over 16x16x32x32 258 -> 88 us with a relative error of 6e-5 -> 1e-7; a per-channel
// sum of x*x over N, H, W 180 -> 82 us). Row reductions already of that form, short runs and
// reductions that keep the last dimension are emitted as they are.
#pragma once

#include "hlo/tensor_type.h"

namespace tpu::hlo {

struct ReducePlan {
  bool staged = false;
  bool split = false;  // the run was split into blocks (`second` ends with the block count's dim)
  Dims rows;    // the operand seen as [rows, block]; the first stage reduces dimension 1
  Dims middle;  // the first stage's result seen with this shape
  Dims second;  // dimensions of `middle` the second stage reduces (may be empty)
};

// The plan for reducing `reduce_dims` (distinct, in range) of an operand of shape `in`.
ReducePlan plan_reduce(const Dims& in, const Dims& reduce_dims);

}  // namespace tpu::hlo
