// LSTM layers for the XLA CPU plugin, run by ATen's CPU kernel (oneDNN's LSTM primitive) from
// inside the program. XLA's code for a layer (lowering/lstm_layer.cc: a stablehlo.while with one
// recurrent product per step) takes ~1.5x the time of oneDNN's fused LSTM forward and backward at
// the zoo's medium size (benchmarks/zoo.py: lstm; docs/benchmarks.md). On this plugin the device's
// buffers are host memory, so the program hands them to that kernel in place. The aten kernels
// (aten/lstm_layer_ops.cc) mark aten::mkldnn_rnn_layer `host_kernel` when the plugin registered
// this kernel, the layer is float32 and no precision override is set; the backward follows its
// forward (it takes the host kernel exactly when the workspace it gets is this kernel's).
//
//   forward:  stablehlo.custom_call @torch_tpu_lstm(x T×B×I, w_ih, w_hh, [b_ih, b_hh], h0 B×H, c0)
//             -> y T×B×H, hT, cT, workspace (uint8 [lstm_workspace_offsets(...).back()])
//   backward: stablehlo.custom_call @torch_tpu_lstm(x, w_ih, w_hh, [b_ih, b_hh], h0, c0, y, hT,
//             cT, workspace, [grad_y], [grad_hT], [grad_cT])
//             -> grad_x, grad_w_ih, grad_w_hh, [grad_b_ih, grad_b_hh], grad_h0, grad_c0
//   attributes (api_version = 4, scalars): backward (0/1), reverse, bias, and for the backward
//   grad_y, grad_hy, grad_cy (which optional gradients are operands)
//
// The batch is split into blocks, one per core (host_aten/kernel_call.h), each run by a serial
// oneDNN LSTM; the workspace holds the blocks' oneDNN workspaces one after another.
#pragma once

#include <cstdint>
#include <vector>

namespace tpu::host_aten {

constexpr const char* kLstm = "torch_tpu_lstm";

// The multiply-adds of a layer's forward (T x B x 4H x (I + H)) from which it takes the kernel:
// TORCH_TPU_HOST_LSTM_MIN_MACS (read once), else the default below; set_... changes it for the
// process (tests; programs already compiled keep their choice) and returns the old value.
double host_lstm_min_macs();
double set_host_lstm_min_macs(double macs);

// Where each batch block's oneDNN workspace starts in the layer's workspace buffer, and (last
// entry) its size in bytes, for a float32 layer of these sizes. The first call for a shape runs
// the CPU kernel once on zeros to learn the sizes (oneDNN decides them); later calls read a cache.
std::vector<int64_t> lstm_workspace_offsets(int64_t T, int64_t B, int64_t I, int64_t H, bool bias, bool reverse);

}  // namespace tpu::host_aten
