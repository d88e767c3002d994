// Convolutions for the XLA CPU plugin, run by ATen's CPU kernels (oneDNN) from inside the program.
// XLA's CPU code for a convolution (YNNPACK after NCHW -> NHWC transposes) takes 1.5-3.5x the time
// of the oneDNN kernels PyTorch's CPU convolution calls (benchmarks/op_kernels.py; the weight
// gradient is the worst); on this plugin the device's buffers are host memory, so the program can
// hand them to those kernels in place. The lowering (lowering/convolution.cc) emits this custom
// call when the aten kernel marks the op `host_kernel` (the plugin registered it, float32/float64,
// large enough, no precision override); every other plugin keeps stablehlo.convolution.
//
//   forward:  stablehlo.custom_call @torch_tpu_conv(x, w[, bias]) -> y
//   backward: stablehlo.custom_call @torch_tpu_conv(grad_y, x, w) -> the outputs `mask` asks for,
//             in order (grad_x: bit 1, grad_w: bit 2, grad_bias: bit 4)
//   attributes (api_version = 4, scalars): spatial (1-3), stride<i>, padding<i>, dilation<i>,
//   output_padding<i> for i < spatial, groups, transposed, bias (forward: a bias operand),
//   mask (0: forward)
//
// Lives in the extension (it links ATen), not in the torch-free core: it is added to the core's
// registry (host_kernels/registry.h) when the extension loads.
#pragma once

namespace tpu::host_aten {

constexpr const char* kConv = "torch_tpu_conv";

// The multiply-adds from which a convolution takes the kernel (smaller ones keep XLA's):
// TORCH_TPU_HOST_CONV_MIN_MACS (read once), else 1e8 - between the zoo's small CNN's convolutions
// (3.8e7, slower through the kernel) and its medium one's (3.0e8, 1.4-1.5x faster steps).
double host_conv_min_macs();
// Tests: changes it for the process (programs already compiled keep their choice) and returns
// the old value.
double set_host_conv_min_macs(double macs);

}  // namespace tpu::host_aten
