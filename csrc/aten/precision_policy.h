// TF32 policy of float32 matrix products and convolutions. When allowed, float32 dot/conv
// lowerings emit XLA's DEFAULT precision (TF32 on NVIDIA GPUs, bf16 passes on TPUs) instead of
// HIGHEST (exact float32). The choice is an op attribute ("tf32"), so it is part of every
// program signature and compilation cache key.
//   matmul: PyTorch's process-wide float32 matmul precision - torch.backends.tpu.matmul.allow_tf32,
//           torch.backends.cuda.matmul.allow_tf32 and torch.set_float32_matmul_precision("high")
//           are one switch, as on CUDA (default "highest": exact).
//   conv:   torch.backends.tpu.conv.allow_tf32, torch_tpu's own switch (default False, unlike
//           cuDNN's True: on a TPU DEFAULT means one bf16 pass).
// torch.tpu.precision(mode) (a process-wide stack) takes precedence over both for every floating
// dtype: the attribute "precision" (StableHLO's DEFAULT = 0, HIGH = 1, HIGHEST = 2) is set on
// the op, so it is part of the signature as well.
#pragma once

#include <ATen/core/Tensor.h>

#include "aten/op_runner.h"

namespace tpu::aten {

bool matmul_allows_tf32();
bool conv_allows_tf32();
void set_conv_allows_tf32(bool allow);

// torch.tpu.precision: push throws std::invalid_argument outside 0..2; -1: none active.
void push_precision(int precision);
void pop_precision();
int precision_override();

// Marks a float32 matrix product / convolution whose policy allows TF32 (others unchanged).
void mark_matmul_precision(OpRunner& r, at::ScalarType dtype);
void mark_conv_precision(OpRunner& r, at::ScalarType dtype);

}  // namespace tpu::aten
