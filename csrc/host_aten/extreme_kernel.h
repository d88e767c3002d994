// amax/amin (and max, min, aminmax) of float32/float64 arrays on the XLA CPU plugin, run by ATen's
// CPU kernels from inside the program. The plugin hands a plain max/min reduction of a stored
// array to YNNPACK, whose max drops NaNs (a 256x1024 row max with a NaN came back finite, where
// PyTorch's is NaN); ATen's kernel propagates them at the same speed (amax of 2048x2048: 0.1 ms;
// XLA's NaN-aware alternatives took 1.3-8.9 ms, docs/design.md). The reduction lowering
// (lowering/reduction.cc) emits this custom call when the aten kernel marks the op `host_kernel`
// (the plugin registered it, float32/float64, at least kHostExtremeMinElements elements); every
// other plugin keeps stablehlo.reduce.
//
//   stablehlo.custom_call @torch_tpu_extreme(x) -> x reduced over the dims (not kept)
//   attributes (api_version = 4, scalars): ndims, dim<i> for i < ndims, max (1: amax, 0: amin)
//
// Lives in the extension (it links ATen), added to the core's registry when the extension loads.
#pragma once

#include <cstdint>

namespace tpu::host_aten {

constexpr const char* kExtreme = "torch_tpu_extreme";

// Smaller reductions keep XLA's reduce (its own loops, which propagate NaN).
constexpr int64_t kHostExtremeMinElements = 1024;

}  // namespace tpu::host_aten
