// torch.autocast("tpu"): PyTorch's own autocast policy lists (the ones CUDA uses), registered
// for AutocastPrivateUse1 - matmuls and convolutions run in the autocast dtype (bfloat16 by
// default), softmax, norms, reductions and losses in float32, mixed-dtype ops promote.
#include <ATen/autocast_mode.h>
#include <torch/library.h>
#include <torch/version.h>

namespace tpu::aten {
namespace {

// As on CUDA: binary_cross_entropy is unsafe to autocast (log of a half-precision sigmoid).
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false, "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

using at::Tensor;
using at::Scalar;
using at::IntArrayRef;
using at::ScalarType;
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
// torch < 2.13's AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE names DimnameList unqualified (2.13
// has no DimnameList any more).
using at::DimnameList;
#endif

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TPU_KERNEL_LOW_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TPU_KERNEL_LOW_PRECISION_FP)
#undef TPU_KERNEL_LOW_PRECISION_FP

#define TPU_KERNEL_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TPU_KERNEL_FP32)
#undef TPU_KERNEL_FP32

#define TPU_KERNEL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_KERNEL_FP32_SET_OPT_DTYPE)
#undef TPU_KERNEL_FP32_SET_OPT_DTYPE

  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

#define TPU_KERNEL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TPU_KERNEL_PROMOTE)
#undef TPU_KERNEL_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN((&binary_cross_entropy_banned)));
}

// Every other op passes through the autocast key unchanged.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

}  // namespace
}  // namespace tpu::aten
