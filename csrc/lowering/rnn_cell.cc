// The fused LSTM and GRU cells PyTorch's RNN layers call on accelerators (aten::_thnn_fused_*),
// forward and backward, one program per cell signature. The gate matrix products are done by the
// caller (ATen's RNN code); these programs do the elementwise part of one time step, with the
// same gate order and workspace layout as PyTorch's CUDA kernels, so the backward kernels take
// what the forward saved.
//
// All math runs in the inputs' dtype as converted by the kernel (float32 for half types); attr
// out_dtype is the dtype of every output.
//
//   lstm_cell:          [igates B×4H, hgates B×4H, cx B×H, (b_ih 4H, b_hh 4H)] -> hy, cy, workspace B×4H
//                       workspace = the activated gates (i, f, g, o)
//   lstm_cell_backward: [(grad_hy), (grad_cy), cx, cy, workspace] -> grad_gates B×4H, grad_cx, (grad_bias 4H)
//   gru_cell:           [igates B×3H, hgates B×3H, hx B×H, (b_ih 3H, b_hh 3H)] -> hy, workspace B×5H
//                       workspace = (r, z, n, hx, hn + b_hn) per row
//   gru_cell_backward:  [grad_hy, workspace] -> grad_igates, grad_hgates, grad_hx, (grad_b_ih, grad_b_hh)
//
// attrs: has_bias; for lstm_cell_backward also has_grad_hy, has_grad_cy.
#include "lowering/registry.h"
#include "lowering/rnn_math.h"
#include "lowering/shape_helpers.h"

#include <stdexcept>
#include <string>

namespace tpu::lowering {
namespace {

using hlo::Builder;
using hlo::Dims;
using hlo::Value;
using rnn::add_bias;
using rnn::column_sum;
using rnn::gate;
using rnn::one_minus;
using rnn::out_cast;
using rnn::sigmoid;
using rnn::tanh;

void check_rank2(Builder& b, Value v, const char* op, const char* what) {
  if (b.type(v).rank() != 2) {
    throw std::invalid_argument(std::string(op) + ": " + what + " must be 2D, got " + b.type(v).str());
  }
}

std::vector<Value> lower_lstm_cell(Context& ctx, const std::vector<Value>& in) {
  Builder& b = ctx.b;
  Value igates = in[0], hgates = in[1], cx = in[2];
  check_rank2(b, igates, "lstm_cell", "input_gates");
  check_rank2(b, cx, "lstm_cell", "cx");
  const int64_t h = b.dims(cx)[1];
  Value gates = b.add(igates, hgates);
  if (ctx.attrs.get_bool("has_bias")) gates = add_bias(b, add_bias(b, gates, in[3]), in[4]);
  const rnn::LstmStep s = rnn::lstm_step(b, gates, cx, h);
  Value hy = s.h, cy = s.c;
  Value workspace = b.concatenate({s.i, s.f, s.g, s.o}, 1);
  return {out_cast(ctx, hy), out_cast(ctx, cy), out_cast(ctx, workspace)};
}

std::vector<Value> lower_lstm_cell_backward(Context& ctx, const std::vector<Value>& in) {
  Builder& b = ctx.b;
  size_t next = 0;
  Value grad_hy = ctx.attrs.get_bool("has_grad_hy") ? in[next++] : Value{};
  Value grad_cy = ctx.attrs.get_bool("has_grad_cy") ? in[next++] : Value{};
  Value cx = in[next++], cy = in[next++], ws = in[next++];
  check_rank2(b, cx, "lstm_cell_backward", "cx");
  const int64_t h = b.dims(cx)[1];
  Value i = gate(b, ws, 0, h), f = gate(b, ws, 1, h), g = gate(b, ws, 2, h), o = gate(b, ws, 3, h);
  const rnn::LstmStepGrad grad = rnn::lstm_step_backward(b, grad_hy, grad_cy, i, f, g, o, cx, cy);
  Value grad_gates = grad.gates;
  std::vector<Value> out{out_cast(ctx, grad_gates), out_cast(ctx, grad.c_prev)};
  if (ctx.attrs.get_bool("has_bias")) out.push_back(out_cast(ctx, column_sum(b, grad_gates)));
  return out;
}

std::vector<Value> lower_gru_cell(Context& ctx, const std::vector<Value>& in) {
  Builder& b = ctx.b;
  Value igates = in[0], hgates = in[1], hx = in[2];
  check_rank2(b, igates, "gru_cell", "input_gates");
  check_rank2(b, hx, "gru_cell", "hx");
  const int64_t h = b.dims(hx)[1];
  if (ctx.attrs.get_bool("has_bias")) {
    igates = add_bias(b, igates, in[3]);
    hgates = add_bias(b, hgates, in[4]);
  }
  Value r = sigmoid(b, b.add(gate(b, igates, 0, h), gate(b, hgates, 0, h)));
  Value z = sigmoid(b, b.add(gate(b, igates, 1, h), gate(b, hgates, 1, h)));
  Value hn = gate(b, hgates, 2, h);
  Value n = tanh(b, b.add(gate(b, igates, 2, h), b.mul(r, hn)));
  Value hy = b.add(n, b.mul(z, b.sub(hx, n)));  // (1 - z) * n + z * hx
  Value workspace = b.concatenate({r, z, n, hx, hn}, 1);
  return {out_cast(ctx, hy), out_cast(ctx, workspace)};
}

std::vector<Value> lower_gru_cell_backward(Context& ctx, const std::vector<Value>& in) {
  Builder& b = ctx.b;
  Value grad_hy = in[0], ws = in[1];
  check_rank2(b, grad_hy, "gru_cell_backward", "grad_hy");
  const int64_t h = b.dims(grad_hy)[1];
  Value r = gate(b, ws, 0, h), z = gate(b, ws, 1, h), n = gate(b, ws, 2, h), hx = gate(b, ws, 3, h),
        hn = gate(b, ws, 4, h);
  Value grad_hx = b.mul(grad_hy, z);
  Value gn = b.mul(b.mul(grad_hy, one_minus(b, z)), one_minus(b, b.mul(n, n)));
  Value gz = b.mul(b.mul(grad_hy, b.sub(hx, n)), b.mul(z, one_minus(b, z)));
  Value ghn = b.mul(gn, r);
  Value gr = b.mul(b.mul(gn, hn), b.mul(r, one_minus(b, r)));
  Value grad_igates = b.concatenate({gr, gz, gn}, 1);
  Value grad_hgates = b.concatenate({gr, gz, ghn}, 1);
  std::vector<Value> out{out_cast(ctx, grad_igates), out_cast(ctx, grad_hgates), out_cast(ctx, grad_hx)};
  if (ctx.attrs.get_bool("has_bias")) {
    out.push_back(out_cast(ctx, column_sum(b, grad_igates)));
    out.push_back(out_cast(ctx, column_sum(b, grad_hgates)));
  }
  return out;
}

const LoweringEntry kRnnCellLowerings[] = {
    {"lstm_cell", lower_lstm_cell},
    {"lstm_cell_backward", lower_lstm_cell_backward},
    {"gru_cell", lower_gru_cell},
    {"gru_cell_backward", lower_gru_cell_backward},
};
TPU_REGISTER_LOWERINGS(kRnnCellLowerings);

}  // namespace
}  // namespace tpu::lowering
