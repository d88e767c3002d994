// torch.optim.Adam/AdamW(fused=True) on the device (the Hugging Face Trainer's default optimizer,
// "adamw_torch_fused"): the update written with tpu ops, so parameters and optimizer state never
// leave the device. The step counts stay on the device too: bias corrections are computed there in
// float64 (as PyTorch's CPU kernel does on the host), so no host sync per step.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace tpu::aten {
namespace {

// The learning rate is a Python float or a tensor (the `.tensor_lr` overloads).
struct Lr {
  double value = 0;
  std::optional<at::Tensor> tensor;
  at::Tensor times(const at::Tensor& t) const { return tensor ? t * *tensor : t * value; }
};

void adam_step(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
               at::TensorList max_exp_avg_sqs, at::TensorList steps, const Lr& lr, double beta1, double beta2,
               double weight_decay, double eps, bool amsgrad, bool maximize,
               const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf,
               bool decoupled_decay) {
  const size_t n = params.size();
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && steps.size() == n,
              "fused adam: params, grads, exp_avgs, exp_avg_sqs and state_steps must have the same length");
  TORCH_CHECK(!amsgrad || max_exp_avg_sqs.size() == n, "fused adam: amsgrad needs one max_exp_avg_sq per param");
  // A step the grad scaler found overflowing is skipped entirely (one host read of the flag).
  if (found_inf.has_value() && found_inf->defined() && found_inf->item<double>() != 0) return;
  const bool unscale = grad_scale.has_value() && grad_scale->defined();
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& param = params[i];
    at::Tensor grad = grads[i];
    TORCH_CHECK(grad.sizes() == param.sizes(), "fused adam: grad ", i, " has shape ", grad.sizes(),
                " but its param has ", param.sizes());
    if (unscale) grad.div_(*grad_scale);  // written back, like CUDA's kernel
    at::Tensor g = maximize ? grad.neg() : grad;
    if (weight_decay != 0) {
      if (decoupled_decay) {
        param.sub_(lr.times(param) * weight_decay);
      } else {
        g = g.add(param, weight_decay);
      }
    }
    exp_avgs[i].lerp_(g, 1 - beta1);
    exp_avg_sqs[i].mul_(beta2).addcmul_(g, g, 1 - beta2);
    const at::Tensor step = steps[i].to(at::kDouble);
    const at::Tensor bias_correction1 = 1 - at::pow(beta1, step);
    const at::Tensor bias_correction2_sqrt = at::sqrt(1 - at::pow(beta2, step));
    const at::Tensor step_size = lr.times(bias_correction1.reciprocal()).to(param.scalar_type());
    at::Tensor second = exp_avg_sqs[i];
    if (amsgrad) {
      at::Tensor running_max = max_exp_avg_sqs[i];
      at::maximum_out(running_max, running_max, exp_avg_sqs[i]);
      second = running_max;
    }
    const at::Tensor denom = (second.sqrt() / bias_correction2_sqrt.to(param.scalar_type())).add_(eps);
    param.sub_(exp_avgs[i] / denom * step_size);
  }
}

// aten::_fused_adam(w)_ with a float lr; kDecoupled: AdamW's decoupled weight decay.
template <bool kDecoupled>
void k_fused_adam_(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                   at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr, double beta1, double beta2,
                   double weight_decay, double eps, bool amsgrad, bool maximize,
                   const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  adam_step(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, Lr{lr, std::nullopt}, beta1, beta2,
            weight_decay, eps, amsgrad, maximize, grad_scale, found_inf, kDecoupled);
}
// The .tensor_lr overloads: the learning rate is a tensor.
template <bool kDecoupled>
void k_fused_adam_tensor_lr_(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
                             at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs, at::TensorList state_steps,
                             const at::Tensor& lr, double beta1, double beta2, double weight_decay, double eps,
                             bool amsgrad, bool maximize, const std::optional<at::Tensor>& grad_scale,
                             const std::optional<at::Tensor>& found_inf) {
  adam_step(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, Lr{0, lr}, beta1, beta2, weight_decay,
            eps, amsgrad, maximize, grad_scale, found_inf, kDecoupled);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_adamw_", k_fused_adam_<true>);
  m.impl("_fused_adamw_.tensor_lr", k_fused_adam_tensor_lr_<true>);
  m.impl("_fused_adam_", k_fused_adam_<false>);
  m.impl("_fused_adam_.tensor_lr", k_fused_adam_tensor_lr_<false>);
}

}  // namespace
}  // namespace tpu::aten
