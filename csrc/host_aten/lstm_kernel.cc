#include "host_aten/lstm_kernel.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "host_aten/buffer_tensors.h"
#include "host_aten/kernel_call.h"
#include "host_aten/macs_threshold.h"
#include "host_kernels/ffi_call_frame.h"
#include "host_kernels/registry.h"

namespace tpu::host_aten {
namespace {

using host_kernels::HostCall;

constexpr int64_t kLstmMode = 2;  // oneDNN's (ideep's) rnn kind for LSTM

// The uint8 workspace buffer as a CPU tensor over its memory.
at::Tensor bytes_of(const host_kernels::ffi_abi::Buffer& b) {
  if (b.dtype != host_kernels::ffi_abi::kU8 || b.rank != 1) throw std::invalid_argument("expects a uint8 workspace");
  return at::from_blob(b.data, {b.dims[0]}, at::TensorOptions().dtype(at::kByte));
}

struct Layer {
  at::Tensor x, w_ih, w_hh, b_ih, b_hh, h0, c0;
  int64_t T = 0, B = 0, I = 0, H = 0;
  bool bias = false, reverse = false;
};

// The operands every call starts with: x, w_ih, w_hh, [b_ih, b_hh], h0, c0; returns the next index.
int64_t read_layer(const HostCall& call, Layer& l) {
  l.bias = call.scalar_attr("bias", 0) != 0;
  l.reverse = call.scalar_attr("reverse", 0) != 0;
  int64_t i = 0;
  l.x = tensor_of(call.arg(i++));
  l.w_ih = tensor_of(call.arg(i++));
  l.w_hh = tensor_of(call.arg(i++));
  if (l.bias) {
    l.b_ih = tensor_of(call.arg(i++));
    l.b_hh = tensor_of(call.arg(i++));
  } else {
    l.b_ih = l.b_hh = at::empty({0}, l.x.options());
  }
  l.h0 = tensor_of(call.arg(i++));
  l.c0 = tensor_of(call.arg(i++));
  if (l.x.dim() != 3 || l.h0.dim() != 2 || l.w_hh.dim() != 2) throw std::invalid_argument("expects x [T, B, I], h0 [B, H]");
  l.T = l.x.size(0);
  l.B = l.x.size(1);
  l.I = l.x.size(2);
  l.H = l.h0.size(1);
  if (l.w_ih.sizes() != at::IntArrayRef({4 * l.H, l.I}) || l.w_hh.sizes() != at::IntArrayRef({4 * l.H, l.H}) ||
      l.h0.size(0) != l.B || l.c0.sizes() != l.h0.sizes()) {
    throw std::invalid_argument("weights and states do not match the input");
  }
  return i;
}

at::Tensor rows(const at::Tensor& t, int64_t begin, int64_t end) { return t.narrow(0, begin, end - begin); }
at::Tensor batch(const at::Tensor& t, int64_t begin, int64_t end) { return t.narrow(1, begin, end - begin).contiguous(); }

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> cpu_forward(const Layer& l, const at::Tensor& x,
                                                                       const at::Tensor& h0, const at::Tensor& c0) {
  // ATen's CPU layer makes the workspace only with gradients enabled (the kernels run in
  // inference mode; nothing here requires a gradient, so nothing is recorded).
  at::AutoGradMode with_workspace(true);
  return at::mkldnn_rnn_layer(x, l.w_ih, l.w_hh, l.b_ih, l.b_hh, h0, c0, l.reverse, {}, kLstmMode, l.H, 1, l.bias,
                              /*bidirectional=*/false, /*batch_first=*/false, /*train=*/true);
}

void check_workspace(const at::Tensor& ws, const std::vector<int64_t>& offsets) {
  if (ws.numel() != offsets.back()) {
    throw std::invalid_argument("the workspace has " + std::to_string(ws.numel()) + " bytes, this layer needs " +
                                std::to_string(offsets.back()));
  }
}

void forward(const HostCall& call) {
  Layer l;
  if (read_layer(call, l) != call.num_args() || call.num_results() != 4) {
    throw std::invalid_argument("the forward takes x, weights, (biases), h0, c0 and gives y, hT, cT, workspace");
  }
  const at::Tensor y = tensor_of(call.result(0)), hT = tensor_of(call.result(1)), cT = tensor_of(call.result(2));
  const at::Tensor ws = bytes_of(call.result(3));
  const std::vector<int64_t> offsets = lstm_workspace_offsets(l.T, l.B, l.I, l.H, l.bias, l.reverse);
  check_workspace(ws, offsets);
  for_blocks(l.B, [&](int64_t block, int64_t begin, int64_t end) {
    auto [yb, hb, cb, wb] = cpu_forward(l, batch(l.x, begin, end), rows(l.h0, begin, end), rows(l.c0, begin, end));
    y.narrow(1, begin, end - begin).copy_(yb);
    rows(hT, begin, end).copy_(hb);
    rows(cT, begin, end).copy_(cb);
    ws.narrow(0, offsets[block], offsets[block + 1] - offsets[block]).copy_(wb.view({-1}));
  });
}

void backward(const HostCall& call) {
  Layer l;
  int64_t i = read_layer(call, l);
  const at::Tensor y = tensor_of(call.arg(i++)), hT = tensor_of(call.arg(i++)), cT = tensor_of(call.arg(i++));
  const at::Tensor ws = bytes_of(call.arg(i++));
  std::optional<at::Tensor> grad_y, grad_hy, grad_cy;
  if (call.scalar_attr("grad_y", 0) != 0) grad_y = tensor_of(call.arg(i++));
  if (call.scalar_attr("grad_hy", 0) != 0) grad_hy = tensor_of(call.arg(i++));
  if (call.scalar_attr("grad_cy", 0) != 0) grad_cy = tensor_of(call.arg(i++));
  if (i != call.num_args() || call.num_results() != (l.bias ? 7 : 5)) {
    throw std::invalid_argument("the backward's operands or results do not match its attributes");
  }
  const std::vector<int64_t> offsets = lstm_workspace_offsets(l.T, l.B, l.I, l.H, l.bias, l.reverse);
  check_workspace(ws, offsets);
  const int64_t n = blocks(l.B);
  std::vector<at::Tensor> grad_w_ih(n), grad_w_hh(n), grad_b(n);
  const at::Tensor grad_x = tensor_of(call.result(0));
  const at::Tensor grad_h0 = tensor_of(call.result(l.bias ? 5 : 3)), grad_c0 = tensor_of(call.result(l.bias ? 6 : 4));
  auto part = [](const std::optional<at::Tensor>& t, int64_t dim, int64_t begin, int64_t end) {
    return t.has_value() ? std::optional<at::Tensor>(t->narrow(dim, begin, end - begin).contiguous()) : std::nullopt;
  };
  for_blocks(l.B, [&](int64_t block, int64_t begin, int64_t end) {
    const at::Tensor wb = ws.narrow(0, offsets[block], offsets[block + 1] - offsets[block]);
    auto g = at::mkldnn_rnn_layer_backward(
        batch(l.x, begin, end), l.w_ih, l.w_hh, l.b_ih, l.b_hh, rows(l.h0, begin, end), rows(l.c0, begin, end),
        batch(y, begin, end), rows(hT, begin, end).contiguous(), rows(cT, begin, end).contiguous(),
        part(grad_y, 1, begin, end), part(grad_hy, 0, begin, end), part(grad_cy, 0, begin, end), l.reverse, kLstmMode,
        l.H, 1, l.bias, /*train=*/true, /*bidirectional=*/false, {}, /*batch_first=*/false, wb);
    grad_x.narrow(1, begin, end - begin).copy_(std::get<0>(g));
    grad_w_ih[block] = std::get<1>(g);
    grad_w_hh[block] = std::get<2>(g);
    grad_b[block] = std::get<3>(g);
    rows(grad_h0, begin, end).copy_(std::get<5>(g));
    rows(grad_c0, begin, end).copy_(std::get<6>(g));
  });
  write_result(call, 1, sum_of_blocks(grad_w_ih));
  write_result(call, 2, sum_of_blocks(grad_w_hh));
  if (l.bias) {
    const at::Tensor b = sum_of_blocks(grad_b);
    write_result(call, 3, b);
    write_result(call, 4, b);
  }
}

void run(const HostCall& call) {
  if (call.scalar_attr("backward", 0) != 0) {
    backward(call);
  } else {
    forward(call);
  }
}

host_kernels::ffi_abi::Error* handle(host_kernels::ffi_abi::CallFrame* frame) { return run_kernel(frame, kLstm, &run); }

void* handler() { return reinterpret_cast<void*>(&handle); }

// oneDNN's LSTM is in every CPU build of PyTorch this project installs; a build without it keeps
// XLA's formulation.
bool available() { return at::hasMKLDNN(); }

const bool kAdded = host_kernels::add_extension_kernel(kLstm, &handler, &available);

// The bytes of the workspace oneDNN's forward makes for one block of `rows` batch rows: learnt by
// running that forward once on zeros.
int64_t workspace_bytes(int64_t T, int64_t rows, int64_t I, int64_t H, bool bias, bool reverse) {
  SerialAten serial;
  c10::InferenceMode no_autograd;
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  Layer l;
  l.w_ih = at::zeros({4 * H, I}, f32);
  l.w_hh = at::zeros({4 * H, H}, f32);
  l.b_ih = l.b_hh = bias ? at::zeros({4 * H}, f32) : at::empty({0}, f32);
  l.H = H;
  l.bias = bias;
  l.reverse = reverse;
  const at::Tensor state = at::zeros({rows, H}, f32);
  return std::get<3>(cpu_forward(l, at::zeros({T, rows, I}, f32), state, state)).numel();
}

MacsThreshold& min_macs() {
  static MacsThreshold value("TORCH_TPU_HOST_LSTM_MIN_MACS", 2e8);
  return value;
}

}  // namespace

double host_lstm_min_macs() { return min_macs().get(); }
double set_host_lstm_min_macs(double macs) { return min_macs().set(macs); }

std::vector<int64_t> lstm_workspace_offsets(int64_t T, int64_t B, int64_t I, int64_t H, bool bias, bool reverse) {
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool>, int64_t> bytes_for;  // per block size
  const int64_t n = blocks(B);
  std::vector<int64_t> offsets{0};
  for (int64_t b = 0; b < n; ++b) {
    const int64_t rows = B * (b + 1) / n - B * b / n;
    const auto key = std::make_tuple(T, rows, I, H, bias, reverse);
    std::optional<int64_t> known;
    {
      std::lock_guard<std::mutex> g(mu);
      if (auto it = bytes_for.find(key); it != bytes_for.end()) known = it->second;
    }
    if (!known) {
      known = workspace_bytes(T, rows, I, H, bias, reverse);
      std::lock_guard<std::mutex> g(mu);
      bytes_for[key] = *known;
    }
    offsets.push_back(offsets.back() + *known);
  }
  return offsets;
}

}  // namespace tpu::host_aten
