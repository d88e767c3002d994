// Which tpu kernels handle complex64/complex128, in one place. Lowerings that were written
// for real types only must never see complex values (they could silently drop the imaginary
// part), so OpRunner refuses complex calls to lowerings outside the list, and the pointwise
// kernel sends such ops to the CPU fallback instead.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

#include "lowering/attrs.h"

namespace tpu::aten {

// Whether lowering `op` (with these attributes) computes complex values correctly.
bool lowering_supports_complex(const std::string& op, const lowering::Attrs& attrs);
// Whether lowering `op` only moves elements (copies, views, concatenation, indexing): it may see
// complex32 values as their bits. Every other lowering sees them widened to complex64.
bool lowering_moves_bits(const std::string& op);

// The pointwise kernel's hook for a complex compute dtype: runs abs/angle (whose results are
// real) and sends ops without complex support to the CPU fallback. Returns false when the
// table kernel should run the op itself.
bool complex_pointwise(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* lowering);

// copy_ where the source or destination carries PyTorch's lazy conjugate/negative bit: copies
// the physical values with the conjugation/negation applied (copy_ of an external backend
// must resolve the bits itself).
bool has_math_bits(const at::Tensor& src, const at::Tensor& dst);
at::Tensor copy_with_math_bits(const at::Tensor& src, const at::Tensor& dst, bool non_blocking);

// The boxed CPU fallback (aten/fallback.cc): counted, warned once, or refused in strict mode.
void run_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace tpu::aten
