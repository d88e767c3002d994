// nn.LSTM on the device with one program per layer and direction (lowering/lstm_layer.cc)
// instead of ATen's generic RNN loop, which runs a few small programs per time step
// (rnn_ops.cc's cells and the gate matrix products).
//
// aten::lstm is CompositeImplicitAutograd; registered at AutogradPrivateUse1 (and PrivateUse1
// for inference mode) the kernel below takes over for tpu tensors. It runs each layer through
// aten::mkldnn_rnn_layer - the one ATen op for a whole RNN layer that has an autograd formula,
// which calls aten::mkldnn_rnn_layer_backward with what the forward saved; on tpu both are our
// programs (the op's name comes from the CPU's oneDNN path). Lowered by XLA, the workspace is
// ours: the activated gates and the cell state of every step, [T, B, 5H]. On the XLA CPU plugin a
// large float32 layer runs oneDNN's LSTM inside the program instead (mark_host_lstm below); its
// workspace is then oneDNN's, as bytes.
//
// Left to ATen's generic loop (same results, more programs): projections (proj_size), inputs
// without a time step, non-floating dtypes, and calls being traced (FakeTensor, functional
// tensors: tracing decomposes aten::lstm as before, so traced graphs keep their ops).
#include <ATen/autocast_mode.h>
#include <ATen/ops/lstm_native.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/precision_policy.h"
#include "aten/tensor_access.h"
#include "aten/type_promotion.h"
#include "host_aten/kernel_call.h"
#include "host_aten/lstm_kernel.h"
#include "runtime/runtime.h"

namespace tpu::aten {
namespace {

constexpr int64_t kLstmMode = 2;  // mkldnn_rnn_layer's `mode` for LSTM (ideep's rnn_kind)

bool traced(const at::Tensor& t) {
  return t.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::Functionalize}));
}

bool runs_as_layers(const at::Tensor& input, at::TensorList hx, at::TensorList params) {
  if (input.dim() != 3 || input.size(0) == 0 || !at::isFloatingType(input.scalar_type())) return false;
  if (hx.size() != 2 || hx[0].dim() != 3 || hx[1].dim() != 3 || hx[0].size(2) != hx[1].size(2)) return false;
  for (const auto& t : params) {
    if (traced(t) || t.scalar_type() != input.scalar_type()) return false;
  }
  return !traced(input) && !traced(hx[0]) && !traced(hx[1]);
}

void check_layer_call(const char* op, const at::Tensor& input, int64_t mode, int64_t hidden_size,
                      at::IntArrayRef batch_sizes, bool batch_first, const at::Tensor& hx) {
  TORCH_CHECK(mode == kLstmMode, op, " on tpu: only LSTM layers (mode ", kLstmMode, ") are implemented, got mode ",
              mode);
  TORCH_CHECK(batch_sizes.empty(), op, " on tpu: packed sequences are not supported (run the layers through nn.LSTM)");
  TORCH_CHECK(!batch_first, op, " on tpu: expects time-major input [T, B, I]; transpose batch-first input first");
  TORCH_CHECK(input.dim() == 3 && hx.dim() == 2 && hx.size(0) == input.size(1) && hx.size(1) == hidden_size, op,
              ": input ", input.sizes(), " and state ", hx.sizes(), " do not match hidden_size ", hidden_size);
}

void add_layer_attrs(OpRunner& r, bool reverse, bool has_biases, const at::Tensor& like) {
  r.attrs().set_bool("reverse", reverse).set_bool("has_bias", has_biases);
  r.attrs().set_dtype("out_dtype", element_type(like.scalar_type()));
  mark_matmul_precision(r, like.scalar_type());
}

// On the XLA CPU plugin a float32 layer runs oneDNN's LSTM from inside the program
// (host_aten/lstm_kernel.h), marked here so the choice is part of the op's key in every mode; its
// workspace is then that kernel's (uint8), which is how the backward knows to follow. A precision
// override (tf32, torch.tpu.precision) keeps XLA's formulation, which honours it.
void mark_host_lstm(OpRunner& r, const at::Tensor& input, int64_t hidden_size, bool has_biases, bool reverse) {
  if (input.scalar_type() != at::kFloat || r.attrs().has("tf32") || r.attrs().has("precision")) return;
  if (input.numel() == 0 || hidden_size == 0) return;  // oneDNN cannot run an empty layer; XLA's loop can
  if (!runtime::Runtime::get().has_host_kernel(host_aten::kLstm)) return;
  const double macs = static_cast<double>(input.size(0)) * static_cast<double>(input.size(1)) * 4.0 *
                      static_cast<double>(hidden_size) * static_cast<double>(input.size(2) + hidden_size);
  const double min_macs = host_aten::host_lstm_min_macs();
  if (macs < min_macs) return;
  // The kernel splits the batch over the cores; below 16 rows a block, oneDNN's per-step products
  // are too small to beat XLA's loop (measured, docs/design.md). A threshold of 0 takes every layer.
  const int64_t rows = input.size(1) / host_aten::blocks(input.size(1));
  if (min_macs > 0 && rows < 16) return;
  const std::vector<int64_t> offsets = host_aten::lstm_workspace_offsets(input.size(0), input.size(1), input.size(2),
                                                                          hidden_size, has_biases, reverse);
  r.attrs().set_bool("host_kernel", true).set_int("workspace_bytes", offsets.back());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> k_lstm_layer(
    const at::Tensor& input, const at::Tensor& w_ih, const at::Tensor& w_hh, const at::Tensor& b_ih,
    const at::Tensor& b_hh, const at::Tensor& hx, const at::Tensor& cx, bool reverse, at::IntArrayRef batch_sizes,
    int64_t mode, int64_t hidden_size, int64_t /*num_layers*/, bool has_biases, bool /*bidirectional*/,
    bool batch_first, bool /*train*/) {
  check_layer_call("mkldnn_rnn_layer", input, mode, hidden_size, batch_sizes, batch_first, hx);
  const at::ScalarType compute = accumulate_type(input.scalar_type());
  OpRunner r("lstm_layer", "aten::mkldnn_rnn_layer");
  r.input(input, compute).input(w_ih, compute).input(w_hh, compute);
  if (has_biases) r.input(b_ih, compute).input(b_hh, compute);
  r.input(hx, compute).input(cx, compute);
  add_layer_attrs(r, reverse, has_biases, input);
  mark_host_lstm(r, input, hidden_size, has_biases, reverse);
  auto out = r.run(4);
  return {out[0], out[1], out[2], out[3]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> k_lstm_layer_backward(
    const at::Tensor& input, const at::Tensor& w_ih, const at::Tensor& w_hh, const at::Tensor& b_ih,
    const at::Tensor& b_hh, const at::Tensor& hx, const at::Tensor& cx, const at::Tensor& output,
    const at::Tensor& hy, const at::Tensor& cy, const std::optional<at::Tensor>& grad_output,
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy, bool reverse, int64_t mode,
    int64_t hidden_size, int64_t /*num_layers*/, bool has_biases, bool /*train*/, bool /*bidirectional*/,
    at::IntArrayRef batch_sizes, bool batch_first, const at::Tensor& workspace) {
  check_layer_call("mkldnn_rnn_layer_backward", input, mode, hidden_size, batch_sizes, batch_first, hx);
  const at::ScalarType compute = accumulate_type(input.scalar_type());
  OpRunner r("lstm_layer_backward", "aten::mkldnn_rnn_layer_backward");
  if (workspace.scalar_type() == at::kByte) {  // made by the host kernel's forward (mark_host_lstm)
    TORCH_CHECK(workspace.dim() == 1 && input.scalar_type() == at::kFloat, "mkldnn_rnn_layer_backward on tpu: workspace ",
                workspace.sizes(), " (", workspace.scalar_type(), ") was not made by the tpu forward of this layer");
    r.input(input).input(w_ih, compute).input(w_hh, compute);
    if (has_biases) r.input(b_ih, compute).input(b_hh, compute);
    for (const at::Tensor* t : {&hx, &cx, &output, &hy, &cy}) r.input(*t, compute);
    r.input(workspace);
    r.attrs().set_bool("host_kernel", true);
  } else {
    TORCH_CHECK(workspace.dim() == 3 && workspace.size(0) == input.size(0) && workspace.size(2) == 5 * hidden_size,
                "mkldnn_rnn_layer_backward on tpu: workspace ", workspace.sizes(),
                " was not made by the tpu forward (expected [T, B, 5H])");
    for (const at::Tensor* t : {&input, &w_ih, &w_hh, &hx, &cx, &output, &workspace}) r.input(*t, compute);
  }
  for (const auto* g : {&grad_output, &grad_hy, &grad_cy}) {
    if (given(*g)) r.input(**g, compute);
  }
  r.attrs().set_bool("has_grad_y", given(grad_output)).set_bool("has_grad_hy", given(grad_hy));
  r.attrs().set_bool("has_grad_cy", given(grad_cy));
  add_layer_attrs(r, reverse, has_biases, input);
  auto out = r.run(has_biases ? 7 : 5);
  if (!has_biases) return {out[0], out[1], out[2], at::Tensor(), at::Tensor(), out[3], out[4]};
  return {out[0], out[1], out[2], out[3], out[4], out[5], out[6]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_lstm(const at::Tensor& input, at::TensorList hx,
                                                      at::TensorList params, bool has_biases, int64_t num_layers,
                                                      double dropout, bool train, bool bidirectional,
                                                      bool batch_first) {
  // Under torch.autocast("tpu") the layers run in the autocast dtype, as the gate products of
  // ATen's loop would (and CUDA's cuDNN RNN does).
  const at::ScalarType autocast_to = at::autocast::get_autocast_dtype(at::kPrivateUse1);
  if (at::autocast::is_autocast_enabled(at::kPrivateUse1) && input.scalar_type() == at::kFloat &&
      autocast_to != at::kFloat) {
    auto cast = [&](const at::Tensor& t) {
      return at::autocast::cached_cast(autocast_to, t, c10::DeviceType::PrivateUse1);
    };
    auto cast_all = [&](at::TensorList ts) {
      std::vector<at::Tensor> out;
      for (const auto& t : ts) out.push_back(cast(t));
      return out;
    };
    return k_lstm(cast(input), cast_all(hx), cast_all(params), has_biases, num_layers, dropout, train, bidirectional,
                  batch_first);
  }
  if (!runs_as_layers(input, hx, params)) {
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  }
  const int64_t dirs = bidirectional ? 2 : 1, per_layer = has_biases ? 4 : 2;
  TORCH_CHECK(static_cast<int64_t>(params.size()) == num_layers * dirs * per_layer, "lstm: expected ",
              num_layers * dirs * per_layer, " parameter tensors, got ", params.size());
  TORCH_CHECK(hx[0].size(0) == num_layers * dirs, "lstm: expected hidden state of ", num_layers * dirs,
              " layers x directions, got ", hx[0].sizes());
  const int64_t hidden = hx[0].size(2);
  at::Tensor x = batch_first ? input.transpose(0, 1) : input;
  // The op's schema wants bias tensors; without biases the program does not read them.
  const at::Tensor no_bias = has_biases ? at::Tensor() : at::empty({0}, input.options());
  std::vector<at::Tensor> hy, cy;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    std::vector<at::Tensor> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t idx = layer * dirs + d;
      const at::Tensor* p = params.data() + idx * per_layer;
      auto [y, h, c, ws] = at::mkldnn_rnn_layer(x, p[0], p[1], has_biases ? p[2] : no_bias, has_biases ? p[3] : no_bias,
                                                hx[0][idx], hx[1][idx], d == 1, {}, kLstmMode, hidden, 1, has_biases,
                                                bidirectional, false, train);
      outs.push_back(y);
      hy.push_back(h);
      cy.push_back(c);
    }
    x = dirs == 2 ? at::cat(outs, 2) : outs[0];
    if (dropout > 0 && train && layer + 1 < num_layers) x = at::dropout(x, dropout, train);
  }
  return {batch_first ? x.transpose(0, 1) : x, at::stack(hy), at::stack(cy)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("lstm.input", k_lstm);
  m.impl("mkldnn_rnn_layer", k_lstm_layer);
  m.impl("mkldnn_rnn_layer_backward", k_lstm_layer_backward);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("lstm.input", k_lstm); }

}  // namespace tpu::aten
