// A whole LSTM layer (one direction) as one program: the time loop is a stablehlo.while, so
// nn.LSTM costs one program per layer and direction forward and one backward, instead of a few
// small programs per time step (aten/lstm_layer_ops.cc).
//
// The input projection of every time step is one matrix product before the loop, the weight
// gradients and the input gradient one product each after it: only the recurrent product
// h @ W_hh^T (and its transpose backward) runs per step.
//
//   lstm_layer:          [x T×B×I, w_ih 4H×I, w_hh 4H×H, (b_ih 4H, b_hh 4H), h0 B×H, c0 B×H]
//                        -> y T×B×H, hT, cT, workspace T×B×5H
//                        workspace[t] = the activated gates (i, f, g, o) and the cell state c[t]
//   lstm_layer_backward: [x, w_ih, w_hh, h0, c0, y, workspace, (grad_y), (grad_hT), (grad_cT)]
//                        -> grad_x, grad_w_ih, grad_w_hh, (grad_b_ih, grad_b_hh), grad_h0, grad_c0
//
// attrs: reverse (the layer reads time backwards: a bidirectional layer's second direction),
// has_bias, out_dtype (every output); backward also has_grad_y, has_grad_hy, has_grad_cy.
// With host_kernel set (the aten kernel's mark) both are the custom call of host_aten/lstm_kernel.h
// instead, with its operands and a uint8 workspace of workspace_bytes.
// Matrix products use the op's precision attributes (lowering/precision.h).
#include <stdexcept>
#include <string>
#include <vector>

#include "lowering/precision.h"
#include "lowering/registry.h"
#include "lowering/rnn_math.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering {
namespace {

using hlo::Builder;
using hlo::Compare;
using hlo::Dims;
using hlo::Value;
using Args = std::vector<Value>;
using rnn::out_cast;

constexpr ElementType kI64 = ElementType::kI64;

// Sizes of a layer call, checked.
struct Layer {
  int64_t T, B, I, H;
  bool reverse;
};

Layer check_layer(Builder& b, Value x, Value w_ih, Value w_hh, Value h0, const char* op, const Attrs& attrs) {
  const Dims xd = b.dims(x), wi = b.dims(w_ih), wh = b.dims(w_hh), hd = b.dims(h0);
  if (xd.size() != 3 || wi.size() != 2 || wh.size() != 2 || hd.size() != 2) {
    throw std::invalid_argument(std::string(op) +
                                ": expected input [T, B, I], weights [4H, I] and [4H, H], state [B, H]");
  }
  const int64_t H = hd[1];
  if (wi[0] != 4 * H || wi[1] != xd[2] || wh[0] != 4 * H || wh[1] != H || hd[0] != xd[1]) {
    throw std::invalid_argument(std::string(op) + ": weights " + b.type(w_ih).str() + ", " + b.type(w_hh).str() +
                                " do not match input " + b.type(x).str() + " and state " + b.type(h0).str());
  }
  return {xd[0], xd[1], xd[2], H, attrs.get_bool("reverse", false)};
}

// The time index step s of the loop reads: s, or T-1-s for a reverse layer.
Value time_index(Builder& b, const Layer& l, Value s) {
  return l.reverse ? b.sub(b.constant_int(kI64, l.T - 1), s) : s;
}

// [..., K] x [N, K] -> [..., N] (a product with a PyTorch weight, x @ W^T).
Value times_transposed(Builder& b, Value x, Value w, hlo::Precision p) {
  const int64_t last = static_cast<int64_t>(b.dims(x).size()) - 1;
  return b.dot_general(x, w, {}, {}, {last}, {1}, b.dtype(x), p);
}

// Columns [from, to) of the last dim of a [T, B, W] value.
Value columns(Builder& b, Value tbw, int64_t from, int64_t to) {
  const Dims d = b.dims(tbw);
  return b.slice(tbw, {0, 0, from}, {d[0], d[1], to}, {1, 1, 1});
}

// The state each step started from, per time index: `first` [B, W] at the layer's first step,
// else `all` [T, B, W] one step earlier in the layer's reading order.
Value previous_states(Builder& b, const Layer& l, Value all, Value first) {
  Value start = b.reshape(first, {1, l.B, b.dims(first)[1]});
  const Dims d = b.dims(all);
  if (l.T == 1) return start;
  if (l.reverse) return b.concatenate({b.slice(all, {1, 0, 0}, d, {1, 1, 1}), start}, 0);
  return b.concatenate({start, b.slice(all, {0, 0, 0}, {l.T - 1, d[1], d[2]}, {1, 1, 1})}, 0);
}

// The layer run by oneDNN's LSTM inside the program (host_aten/lstm_kernel.h): the operands as
// they are, the layout flags as the custom call's scalar attributes.
Args host_lstm(Builder& b, const Attrs& a, const Args& in, const std::vector<hlo::TensorType>& types, bool backward) {
  std::string config = "call_target_name = \"torch_tpu_lstm\", api_version = 4 : i32, backend_config = {";
  auto add = [&](const char* name, bool v) { config += std::string(name) + " = " + (v ? "1" : "0") + " : i64, "; };
  add("grad_y", a.get_bool("has_grad_y", false));
  add("grad_hy", a.get_bool("has_grad_hy", false));
  add("grad_cy", a.get_bool("has_grad_cy", false));
  add("reverse", a.get_bool("reverse", false));
  add("bias", a.get_bool("has_bias"));
  config += std::string("backward = ") + (backward ? "1" : "0") + " : i64}";
  return b.emit_multi("stablehlo.custom_call", in, types, config);
}

Args lower_lstm_layer(Context& ctx, const Args& in) {
  Builder& b = ctx.b;
  const bool has_bias = ctx.attrs.get_bool("has_bias");
  if (ctx.attrs.get_bool("host_kernel", false)) {
    const Dims xd = b.dims(in[0]), hd = b.dims(in[has_bias ? 5 : 3]);
    const ElementType dt = b.dtype(in[0]);
    return host_lstm(b, ctx.attrs, in,
                     {{dt, {xd[0], xd[1], hd[1]}}, {dt, hd}, {dt, hd},
                      {ElementType::kU8, {ctx.attrs.get_int("workspace_bytes")}}},
                     false);
  }
  Value x = in[0], w_ih = in[1], w_hh = in[2];
  const size_t state = has_bias ? 5 : 3;
  Value h0 = in[state], c0 = in[state + 1];
  const Layer l = check_layer(b, x, w_ih, w_hh, h0, "lstm_layer", ctx.attrs);
  const hlo::Precision p = contraction_precision(ctx.attrs, b.dtype(x));
  const ElementType dt = b.dtype(x);
  Value xg = times_transposed(b, x, w_ih, p);  // [T, B, 4H]: every step's input projection
  if (has_bias) xg = b.add(xg, b.broadcast_in_dim(b.add(in[3], in[4]), b.dims(xg), {2}));
  // h @ W_hh^T per step as a plain [B, H] x [H, 4H] product: XLA:CPU's kernels are much slower
  // for a product with a transposed operand when it has few rows.
  Value w_hh_t = b.transpose(w_hh, {1, 0});
  Value y0 = b.full(hlo::TensorType{dt, {l.T, l.B, l.H}}, 0);
  Value ws0 = b.full(hlo::TensorType{dt, {l.T, l.B, 5 * l.H}}, 0);
  auto out = b.while_loop(
      {b.constant_int(kI64, 0), h0, c0, y0, ws0},
      [&](const Args& v) { return Args{b.compare(v[0], b.constant_int(kI64, l.T), Compare::kLT)}; },
      [&](const Args& v) {
        Value t = time_index(b, l, v[0]);
        Value gates = b.add(index_dim0(b, xg, t), b.dot_general(v[1], w_hh_t, {}, {}, {1}, {0}, dt, p));
        const rnn::LstmStep s = rnn::lstm_step(b, gates, v[2], l.H);
        Value ws = b.concatenate({s.i, s.f, s.g, s.o, s.c}, 1);
        return Args{b.add(v[0], b.constant_int(kI64, 1)), s.h, s.c, update_dim0(b, v[3], s.h, t),
                    update_dim0(b, v[4], ws, t)};
      });
  return {out_cast(ctx, out[3]), out_cast(ctx, out[1]), out_cast(ctx, out[2]), out_cast(ctx, out[4])};
}

Args lower_lstm_layer_backward(Context& ctx, const Args& in) {
  Builder& b = ctx.b;
  if (ctx.attrs.get_bool("host_kernel", false)) {  // operands as host_aten/lstm_kernel.h lists them
    const bool has_bias = ctx.attrs.get_bool("has_bias");
    const ElementType dt = b.dtype(in[0]);
    std::vector<hlo::TensorType> types{{dt, b.dims(in[0])}, {dt, b.dims(in[1])}, {dt, b.dims(in[2])}};
    if (has_bias) types.insert(types.end(), 2, {dt, {b.dims(in[1])[0]}});
    const Dims hd = b.dims(in[has_bias ? 5 : 3]);
    types.insert(types.end(), 2, {dt, hd});
    return host_lstm(b, ctx.attrs, in, types, true);
  }
  Value x = in[0], w_ih = in[1], w_hh = in[2], h0 = in[3], c0 = in[4], y = in[5], ws = in[6];
  size_t next = 7;
  Value grad_y = ctx.attrs.get_bool("has_grad_y") ? in[next++] : Value{};
  Value grad_hy = ctx.attrs.get_bool("has_grad_hy") ? in[next++] : Value{};
  Value grad_cy = ctx.attrs.get_bool("has_grad_cy") ? in[next++] : Value{};
  const Layer l = check_layer(b, x, w_ih, w_hh, h0, "lstm_layer_backward", ctx.attrs);
  const hlo::Precision p = contraction_precision(ctx.attrs, b.dtype(x));
  const ElementType dt = b.dtype(x);
  const int64_t H = l.H;
  Value c_prev_all = previous_states(b, l, columns(b, ws, 4 * H, 5 * H), c0);
  Value dh0 = grad_hy.valid() ? grad_hy : b.full(hlo::TensorType{dt, {l.B, H}}, 0);
  Value dc0 = grad_cy.valid() ? grad_cy : b.full(hlo::TensorType{dt, {l.B, H}}, 0);
  Value dg0 = b.full(hlo::TensorType{dt, {l.T, l.B, 4 * H}}, 0);
  // Steps in reverse reading order, carrying the gradients reaching the previous step's h and c.
  auto out = b.while_loop(
      {b.constant_int(kI64, l.T - 1), dh0, dc0, dg0},
      [&](const Args& v) { return Args{b.compare(v[0], b.constant_int(kI64, 0), Compare::kGE)}; },
      [&](const Args& v) {
        Value t = time_index(b, l, v[0]);
        Value dh = grad_y.valid() ? b.add(v[1], index_dim0(b, grad_y, t)) : v[1];
        Value w = index_dim0(b, ws, t);
        Value i = rnn::gate(b, w, 0, H), f = rnn::gate(b, w, 1, H), g = rnn::gate(b, w, 2, H),
              o = rnn::gate(b, w, 3, H), c = rnn::gate(b, w, 4, H);
        Value c_prev = index_dim0(b, c_prev_all, t);
        const rnn::LstmStepGrad grad = rnn::lstm_step_backward(b, dh, v[2], i, f, g, o, c_prev, c);
        // dh_prev = dgates @ W_hh: [B, 4H] x [4H, H]
        Value dh_prev = b.dot_general(grad.gates, w_hh, {}, {}, {1}, {0}, dt, p);
        return Args{b.sub(v[0], b.constant_int(kI64, 1)), dh_prev, grad.c_prev, update_dim0(b, v[3], grad.gates, t)};
      });
  Value dg = out[3];  // [T, B, 4H]
  Value grad_x = b.dot_general(dg, w_ih, {}, {}, {2}, {0}, dt, p);
  Value grad_w_ih = b.dot_general(dg, x, {}, {}, {0, 1}, {0, 1}, dt, p);
  Value grad_w_hh = b.dot_general(dg, previous_states(b, l, y, h0), {}, {}, {0, 1}, {0, 1}, dt, p);
  Args result{out_cast(ctx, grad_x), out_cast(ctx, grad_w_ih), out_cast(ctx, grad_w_hh)};
  if (ctx.attrs.get_bool("has_bias")) {
    Value grad_b = out_cast(ctx, b.reduce(dg, b.constant(dt, 0), {0, 1}, hlo::ReduceKind::kSum));
    result.push_back(grad_b);
    result.push_back(grad_b);
  }
  result.push_back(out_cast(ctx, out[1]));
  result.push_back(out_cast(ctx, out[2]));
  return result;
}

const LoweringEntry kLstmLayerLowerings[] = {
    {"lstm_layer", lower_lstm_layer},
    {"lstm_layer_backward", lower_lstm_layer_backward},
};
TPU_REGISTER_LOWERINGS(kLstmLayerLowerings);

}  // namespace
}  // namespace tpu::lowering
