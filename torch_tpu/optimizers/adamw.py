"""``AdamW``: Adam with decoupled weight decay (torch.optim.AdamW's update), moments optionally
kept in bfloat16 (computed in float32, stored rounded), step counts on the device."""

import dataclasses

import torch

from .base import Once, Optimizer, named_params, register_group, step_counters, zeros_like_all


@register_group
@dataclasses.dataclass
class AdamWParamGroup:
    params: dict
    opt_state_m: dict = dataclasses.field(default_factory=dict)
    opt_state_v: dict = dataclasses.field(default_factory=dict)
    opt_steps: dict = dataclasses.field(default_factory=dict)


class AdamW(Optimizer):
    ParamGroup = AdamWParamGroup
    HYPERPARAMETERS = ("lr", "weight_decay", "beta1", "beta2", "eps", "use_bfloat16_moments", "amsgrad",
                       "maximize", "foreach", "capturable", "differentiable", "fused", "grad_scale", "found_inf")

    def __init__(self, lr=1e-3, weight_decay=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, use_bfloat16_moments=True,
                 amsgrad=False, maximize=False, foreach=False, capturable=True, differentiable=False, fused=False,
                 grad_scale=None, found_inf=None):
        super().__init__(lr=lr, weight_decay=weight_decay)
        if not (0 <= beta1 < 1 and 0 <= beta2 < 1):
            raise ValueError(f"AdamW: betas must be in [0, 1), got ({beta1}, {beta2})")
        if amsgrad:
            raise ValueError("torch.tpu.optimizers.AdamW does not implement amsgrad; use torch.optim.AdamW(amsgrad=True)")
        if grad_scale is not None or found_inf is not None:
            raise ValueError("torch.tpu.optimizers.AdamW takes unscaled gradients (grad_scale / found_inf are "
                             "for torch.amp's fused optimizers); unscale them before the step")
        self._beta1, self._beta2, self._eps = beta1, beta2, eps
        self._use_bfloat16_moments, self._amsgrad, self._maximize = use_bfloat16_moments, amsgrad, maximize
        # Accepted for the original's signature; the update is always the capturable, per-tensor one.
        self._foreach, self._capturable, self._differentiable, self._fused = foreach, capturable, differentiable, fused
        self._grad_scale, self._found_inf = grad_scale, found_inf

    def init_param_group(self, params):
        params = named_params(params)
        moments = torch.bfloat16 if self._use_bfloat16_moments else None
        return AdamWParamGroup(params, zeros_like_all(params, moments), zeros_like_all(params, moments),
                               step_counters(params))

    @torch.no_grad()
    def step(self, param_group, grads):
        b1, b2, lr, eps = self._beta1, self._beta2, self._lr, self._eps

        def advance(t):  # the step count and its bias corrections, once per counter
            t.add_(1)
            return lr / (1 - b1 ** t), (1 - b2 ** t).sqrt()

        corrections = Once(advance)
        for name, p, g in self._grads_for(param_group, grads):
            m, v = param_group.opt_state_m[name], param_group.opt_state_v[name]
            step_size, bc2_sqrt = corrections(param_group.opt_steps[name])
            g = (-g if self._maximize else g).float()
            p.mul_(1 - lr * self._weight_decay)
            # Out of place: for float32 moments .float() is the moment itself.
            m32 = m.float().lerp(g, 1 - b1)
            v32 = v.float().mul(b2).addcmul_(g, g, value=1 - b2)
            m.copy_(m32)
            v.copy_(v32)
            denom = v32.sqrt().div_(bc2_sqrt).add_(eps)
            p.sub_((m32 * step_size / denom).to(p.dtype))
        return param_group
