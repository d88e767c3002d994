#include "host_aten/conv_kernel.h"

#include <ATen/ATen.h>

#include <array>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "host_aten/buffer_tensors.h"
#include "host_aten/kernel_call.h"
#include "host_aten/macs_threshold.h"
#include "host_kernels/ffi_call_frame.h"
#include "host_kernels/registry.h"

namespace tpu::host_aten {
namespace {

using host_kernels::HostCall;
using host_kernels::ffi_abi::Buffer;

struct Params {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  int64_t groups = 1;
  bool transposed = false;
  bool bias = false;
  int64_t mask = 0;
};

std::vector<int64_t> per_dim(const HostCall& call, const char* name, int64_t n, int64_t fallback) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) {
    v.push_back(static_cast<int64_t>(call.scalar_attr(std::string(name) + std::to_string(i), fallback)));
  }
  return v;
}

Params params_of(const HostCall& call) {
  const int64_t n = static_cast<int64_t>(call.scalar_attr("spatial", 0));
  if (n < 1 || n > 3) throw std::invalid_argument("expects 1 to 3 spatial dimensions");
  Params p;
  p.stride = per_dim(call, "stride", n, 1);
  p.padding = per_dim(call, "padding", n, 0);
  p.dilation = per_dim(call, "dilation", n, 1);
  p.output_padding = per_dim(call, "output_padding", n, 0);
  p.groups = static_cast<int64_t>(call.scalar_attr("groups", 1));
  p.transposed = call.scalar_attr("transposed", 0) != 0;
  p.bias = call.scalar_attr("bias", 0) != 0;
  p.mask = static_cast<int64_t>(call.scalar_attr("mask", 0));
  return p;
}

// Both split the batch over for_blocks (kernel_call.h): the images are independent, and the
// weight's and bias's gradients are sums of the blocks' own.
void forward(const HostCall& call, const Params& p) {
  if (call.num_args() != (p.bias ? 3 : 2) || call.num_results() != 1) {
    throw std::invalid_argument("forward takes x, w (and bias) and gives one result");
  }
  std::optional<at::Tensor> bias;
  if (p.bias) bias = tensor_of(call.arg(2));
  const at::Tensor x = tensor_of(call.arg(0)), w = tensor_of(call.arg(1));
  for_blocks(x.size(0), [&](int64_t, int64_t begin, int64_t end) {
    write_result_rows(call, 0, begin,
                      at::convolution(x.narrow(0, begin, end - begin), w, bias, p.stride, p.padding, p.dilation,
                                      p.transposed, p.output_padding, p.groups));
  });
}

void backward(const HostCall& call, const Params& p) {
  const std::array<bool, 3> mask = {(p.mask & 1) != 0, (p.mask & 2) != 0, (p.mask & 4) != 0};
  const int64_t count = mask[0] + mask[1] + mask[2];
  if (call.num_args() != 3 || call.num_results() != count) {
    throw std::invalid_argument("backward takes grad_y, x, w and gives the masked gradients");
  }
  const at::Tensor grad = tensor_of(call.arg(0)), x = tensor_of(call.arg(1)), w = tensor_of(call.arg(2));
  const std::vector<int64_t> bias_sizes = {grad.size(1)};
  const int64_t n = x.size(0);
  std::vector<at::Tensor> grad_w(blocks(n)), grad_b(blocks(n));  // per block, summed below
  for_blocks(n, [&](int64_t block, int64_t begin, int64_t end) {
    auto g = at::convolution_backward(grad.narrow(0, begin, end - begin), x.narrow(0, begin, end - begin), w,
                                      bias_sizes, p.stride, p.padding, p.dilation, p.transposed, p.output_padding,
                                      p.groups, mask);
    if (mask[0]) write_result_rows(call, 0, begin, std::get<0>(g));
    grad_w[block] = std::get<1>(g);
    grad_b[block] = std::get<2>(g);
  });
  int64_t next = mask[0] ? 1 : 0;
  if (mask[1]) write_result(call, next++, sum_of_blocks(grad_w));
  if (mask[2]) write_result(call, next++, sum_of_blocks(grad_b));
}

void run(const HostCall& call) {
  const Params p = params_of(call);
  if (p.mask == 0) {
    forward(call, p);
  } else {
    backward(call, p);
  }
}

host_kernels::ffi_abi::Error* handle(host_kernels::ffi_abi::CallFrame* frame) { return run_kernel(frame, kConv, &run); }

void* handler() { return reinterpret_cast<void*>(&handle); }

const bool kAdded = host_kernels::add_extension_kernel(kConv, &handler, nullptr);

MacsThreshold& min_macs() {
  static MacsThreshold value("TORCH_TPU_HOST_CONV_MIN_MACS", 1e8);
  return value;
}

}  // namespace

double host_conv_min_macs() { return min_macs().get(); }
double set_host_conv_min_macs(double macs) { return min_macs().set(macs); }
}  // namespace tpu::host_aten
