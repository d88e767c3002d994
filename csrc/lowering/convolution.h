// Convolution in StableHLO with PyTorch's NCHW/OIHW layout: forward (plain and transposed)
// and the two gradients. Shared by the conv ops and by average-pooling's backward.
#pragma once

#include "hlo/builder.h"

namespace tpu::lowering {

struct ConvParams {
  hlo::Dims stride, padding, dilation, output_padding;
  int64_t groups = 1;
  bool transposed = false;
  bool tf32 = false;  // float32 at DEFAULT precision (attr "tf32", aten/precision_policy.h)
  int64_t precision = -1;  // attr "precision" (torch.tpu.precision), -1 when absent
};

// y = conv(x, w) or conv_transpose(x, w); no bias.
hlo::Value conv_forward(hlo::Builder& b, hlo::Value x, hlo::Value w, const ConvParams& p);
// d(loss)/dx of conv_forward, for an input of spatial size `input_spatial`.
hlo::Value conv_input_grad(hlo::Builder& b, hlo::Value grad, hlo::Value w, const ConvParams& p,
                           const hlo::Dims& input_spatial);
// d(loss)/dw of conv_forward.
hlo::Value conv_weight_grad(hlo::Builder& b, hlo::Value grad, hlo::Value x, const ConvParams& p,
                            const hlo::Dims& kernel_spatial);

}  // namespace tpu::lowering
