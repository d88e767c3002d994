// Gate arithmetic shared by the single-step RNN cells (rnn_cell.cc) and the whole-layer LSTM
// (lstm_layer.cc): PyTorch's gate order (LSTM i, f, g, o; GRU r, z, n) over [B, gates*H] rows.
#pragma once

#include "hlo/builder.h"
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

namespace tpu::lowering::rnn {

// Every output of the RNN lowerings is cast to attr out_dtype (the math runs in the compute dtype).
inline hlo::Value out_cast(Context& ctx, hlo::Value v) { return ctx.b.convert(v, ctx.attrs.get_dtype("out_dtype")); }

// Columns [k*h, (k+1)*h) of a [B, n*h] matrix: gate k.
inline hlo::Value gate(hlo::Builder& b, hlo::Value m, int64_t k, int64_t h) {
  const hlo::Dims d = b.dims(m);
  return b.slice(m, {0, k * h}, {d[0], (k + 1) * h}, {1, 1});
}

// A [n*h] bias added to every row of a [B, n*h] matrix.
inline hlo::Value add_bias(hlo::Builder& b, hlo::Value m, hlo::Value bias) {
  return b.add(m, b.broadcast_in_dim(bias, b.dims(m), {1}));
}

inline hlo::Value one_minus(hlo::Builder& b, hlo::Value v) { return b.sub(full_like(b, v, 1), v); }
inline hlo::Value sigmoid(hlo::Builder& b, hlo::Value v) { return b.unary("stablehlo.logistic", v); }
inline hlo::Value tanh(hlo::Builder& b, hlo::Value v) { return b.unary("stablehlo.tanh", v); }

// Column sums of a [B, n] matrix: a bias gradient.
inline hlo::Value column_sum(hlo::Builder& b, hlo::Value m) {
  return b.reduce(m, b.constant(b.dtype(m), 0), {0}, hlo::ReduceKind::kSum);
}

// One LSTM step from its pre-activation gates [B, 4H] and the previous cell state.
struct LstmStep {
  hlo::Value i, f, g, o;  // activated gates
  hlo::Value c, h;        // new cell and hidden state
};
inline LstmStep lstm_step(hlo::Builder& b, hlo::Value gates, hlo::Value c_prev, int64_t h) {
  LstmStep s;
  s.i = sigmoid(b, gate(b, gates, 0, h));
  s.f = sigmoid(b, gate(b, gates, 1, h));
  s.g = tanh(b, gate(b, gates, 2, h));
  s.o = sigmoid(b, gate(b, gates, 3, h));
  s.c = b.add(b.mul(s.f, c_prev), b.mul(s.i, s.g));
  s.h = b.mul(s.o, tanh(b, s.c));
  return s;
}

// The gradients of one LSTM step: from the gradients reaching its hidden and cell outputs
// (either may be invalid: none), its activated gates, previous and new cell state, to the
// pre-activation gates' gradient [B, 4H] and the previous cell state's.
struct LstmStepGrad {
  hlo::Value gates, c_prev;
};
inline LstmStepGrad lstm_step_backward(hlo::Builder& b, hlo::Value grad_h, hlo::Value grad_c, hlo::Value i,
                                       hlo::Value f, hlo::Value g, hlo::Value o, hlo::Value c_prev,
                                       hlo::Value c) {
  hlo::Value tanh_c = tanh(b, c);
  // Gradient reaching the cell state: from grad_c directly and through h = o * tanh(c).
  hlo::Value gc = grad_c.valid() ? grad_c : full_like(b, c, 0);
  hlo::Value go = full_like(b, o, 0);
  if (grad_h.valid()) {
    gc = b.add(gc, b.mul(b.mul(grad_h, o), one_minus(b, b.mul(tanh_c, tanh_c))));
    go = b.mul(b.mul(grad_h, tanh_c), b.mul(o, one_minus(b, o)));
  }
  hlo::Value gi = b.mul(b.mul(gc, g), b.mul(i, one_minus(b, i)));
  hlo::Value gf = b.mul(b.mul(gc, c_prev), b.mul(f, one_minus(b, f)));
  hlo::Value gg = b.mul(b.mul(gc, i), one_minus(b, b.mul(g, g)));
  return {b.concatenate({gi, gf, gg, go}, 1), b.mul(gc, f)};
}

}  // namespace tpu::lowering::rnn
