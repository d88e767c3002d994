// The fused LSTM/GRU cells behind nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell on the device.
// ATen's RNN code (aten::lstm, aten::gru and their packed-sequence overloads) runs the layer and
// time loops and the gate matrix products itself and calls these accelerator-only kernels for the
// elementwise part of each step; PyTorch has no CPU kernel for them, so without these the layers
// could not run at all. Each is one program (lowering/rnn_cell.cc); autograd uses PyTorch's
// formulas, which call the backward kernels below with the workspace the forward saved.
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

// Both biases or neither (ATen's cells always pass them together).
bool check_biases(const char* op, const std::optional<at::Tensor>& b_ih, const std::optional<at::Tensor>& b_hh,
                  int64_t width) {
  TORCH_CHECK(given(b_ih) == given(b_hh), op, ": input_bias and hidden_bias must both be given or both be None");
  if (!given(b_ih)) return false;
  TORCH_CHECK(b_ih->dim() == 1 && b_ih->size(0) == width && b_hh->dim() == 1 && b_hh->size(0) == width, op,
              ": expected biases of shape [", width, "], got ", b_ih->sizes(), " and ", b_hh->sizes());
  return true;
}

// input_gates/hidden_gates [B, gates*H] and the state [B, H] of one cell step.
void check_cell(const char* op, const at::Tensor& igates, const at::Tensor& hgates, const at::Tensor& state,
                int64_t gates) {
  TORCH_CHECK(at::isFloatingType(igates.scalar_type()), op, ": expected floating-point gates, got ",
              igates.scalar_type());
  TORCH_CHECK(hgates.scalar_type() == igates.scalar_type() && state.scalar_type() == igates.scalar_type(), op,
              ": gates and state must have the same dtype, got ", igates.scalar_type(), ", ",
              hgates.scalar_type(), " and ", state.scalar_type());
  TORCH_CHECK(igates.dim() == 2 && state.dim() == 2, op, ": expected 2D gates and state, got ", igates.sizes(),
              " and ", state.sizes());
  TORCH_CHECK(hgates.sizes() == igates.sizes(), op, ": input_gates ", igates.sizes(), " and hidden_gates ",
              hgates.sizes(), " must have the same shape");
  TORCH_CHECK(igates.size(0) == state.size(0) && igates.size(1) == gates * state.size(1), op, ": gates ",
              igates.sizes(), " do not match the state ", state.sizes(), " (expected [B, ", gates, "*H])");
}

void add_biases(OpRunner& r, const std::optional<at::Tensor>& b_ih, const std::optional<at::Tensor>& b_hh,
                at::ScalarType compute) {
  r.input(*b_ih, compute).input(*b_hh, compute);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_fused_lstm_cell(const at::Tensor& igates, const at::Tensor& hgates,
                                                                 const at::Tensor& cx,
                                                                 const std::optional<at::Tensor>& b_ih,
                                                                 const std::optional<at::Tensor>& b_hh) {
  check_cell("_thnn_fused_lstm_cell", igates, hgates, cx, 4);
  const bool has_bias = check_biases("_thnn_fused_lstm_cell", b_ih, b_hh, igates.size(1));
  const at::ScalarType compute = accumulate_type(igates.scalar_type());
  OpRunner r("lstm_cell", "aten::_thnn_fused_lstm_cell");
  r.input(igates, compute).input(hgates, compute).input(cx, compute);
  if (has_bias) add_biases(r, b_ih, b_hh, compute);
  r.attrs().set_bool("has_bias", has_bias).set_dtype("out_dtype", element_type(igates.scalar_type()));
  auto out = r.run(3);
  return {out[0], out[1], out[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> k_fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  // No gradient reached this step (like CUDA's kernel: undefined gradients).
  if (!given(grad_hy) && !given(grad_cy)) return {};
  TORCH_CHECK(cx.dim() == 2 && cy.sizes() == cx.sizes(), "_thnn_fused_lstm_cell_backward: cx ", cx.sizes(),
              " and cy ", cy.sizes(), " must be the same 2D shape");
  TORCH_CHECK(workspace.dim() == 2 && workspace.size(0) == cx.size(0) && workspace.size(1) == 4 * cx.size(1),
              "_thnn_fused_lstm_cell_backward: workspace ", workspace.sizes(), " does not match cx ", cx.sizes());
  for (const auto* g : {&grad_hy, &grad_cy}) {
    TORCH_CHECK(!given(*g) || (*g)->sizes() == cx.sizes(), "_thnn_fused_lstm_cell_backward: gradient ",
                (*g)->sizes(), " does not match the state ", cx.sizes());
  }
  const at::ScalarType compute = accumulate_type(workspace.scalar_type());
  OpRunner r("lstm_cell_backward", "aten::_thnn_fused_lstm_cell_backward_impl");
  if (given(grad_hy)) r.input(*grad_hy, compute);
  if (given(grad_cy)) r.input(*grad_cy, compute);
  r.input(cx, compute).input(cy, compute).input(workspace, compute);
  r.attrs().set_bool("has_grad_hy", given(grad_hy)).set_bool("has_grad_cy", given(grad_cy));
  r.attrs().set_bool("has_bias", has_bias).set_dtype("out_dtype", element_type(workspace.scalar_type()));
  auto out = r.run(has_bias ? 3 : 2);
  return {out[0], out[1], has_bias ? out[2] : at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor> k_fused_gru_cell(const at::Tensor& igates, const at::Tensor& hgates,
                                                    const at::Tensor& hx, const std::optional<at::Tensor>& b_ih,
                                                    const std::optional<at::Tensor>& b_hh) {
  check_cell("_thnn_fused_gru_cell", igates, hgates, hx, 3);
  const bool has_bias = check_biases("_thnn_fused_gru_cell", b_ih, b_hh, igates.size(1));
  const at::ScalarType compute = accumulate_type(igates.scalar_type());
  OpRunner r("gru_cell", "aten::_thnn_fused_gru_cell");
  r.input(igates, compute).input(hgates, compute).input(hx, compute);
  if (has_bias) add_biases(r, b_ih, b_hh, compute);
  r.attrs().set_bool("has_bias", has_bias).set_dtype("out_dtype", element_type(igates.scalar_type()));
  auto out = r.run(2);
  return {out[0], out[1]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> k_fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  TORCH_CHECK(grad_hy.dim() == 2 && workspace.dim() == 2 && workspace.size(0) == grad_hy.size(0) &&
                  workspace.size(1) == 5 * grad_hy.size(1),
              "_thnn_fused_gru_cell_backward: workspace ", workspace.sizes(), " does not match grad_hy ",
              grad_hy.sizes(), " (expected [B, 5*H])");
  const at::ScalarType compute = accumulate_type(workspace.scalar_type());
  OpRunner r("gru_cell_backward", "aten::_thnn_fused_gru_cell_backward");
  r.input(grad_hy, compute).input(workspace, compute);
  r.attrs().set_bool("has_bias", has_bias).set_dtype("out_dtype", element_type(workspace.scalar_type()));
  auto out = r.run(has_bias ? 5 : 3);
  if (!has_bias) return {out[0], out[1], out[2], at::Tensor(), at::Tensor()};
  return {out[0], out[1], out[2], out[3], out[4]};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", k_fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", k_fused_lstm_cell_backward_impl);
  m.impl("_thnn_fused_gru_cell", k_fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", k_fused_gru_cell_backward);
}

}  // namespace
}  // namespace tpu::aten
