"""``Muon``: torch.optim.Muon's update (momentum, optional Nesterov, Newton-Schulz
orthogonalisation of 2-D gradients, decoupled weight decay, its learning-rate adjustments), with
the momentum buffer optionally in bfloat16. Parameters must be matrices, as in torch.optim.Muon."""

import torch
from torch.optim import _muon

from .base import MomentumParamGroup, Optimizer, named_params, step_counters, zeros_like_all

DEFAULT_NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


class Muon(Optimizer):
    ParamGroup = MomentumParamGroup
    HYPERPARAMETERS = ("lr", "weight_decay", "momentum", "nesterov", "ns_coefficients", "eps", "ns_steps",
                       "adjust_lr_fn", "use_bfloat16_moments", "foreach", "has_complex")

    def __init__(self, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True, ns_coefficients=DEFAULT_NS_COEFFICIENTS,
                 eps=1e-7, ns_steps=5, adjust_lr_fn=None, use_bfloat16_moments=False, foreach=False,
                 has_complex=False):
        super().__init__(lr=lr, weight_decay=weight_decay)
        if not 0 <= momentum < 1:
            raise ValueError(f"Muon: momentum must be in [0, 1), got {momentum}")
        if ns_steps >= 100 or len(ns_coefficients) != 3:
            raise ValueError("Muon: ns_steps must be < 100 and ns_coefficients three numbers")
        if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise ValueError(f"Muon: adjust_lr_fn must be None, 'original' or 'match_rms_adamw', got {adjust_lr_fn!r}")
        if has_complex:
            raise ValueError("Muon: complex parameters are not supported")
        self._momentum, self._nesterov, self._ns_coefficients = momentum, nesterov, tuple(ns_coefficients)
        self._eps, self._ns_steps, self._adjust_lr_fn = eps, ns_steps, adjust_lr_fn
        self._use_bfloat16_moments, self._foreach, self._has_complex = use_bfloat16_moments, foreach, has_complex

    def init_param_group(self, params):
        params = named_params(params)
        for name, p in params.items():
            if p.dim() != 2:
                raise ValueError(f"Muon optimizes matrices; parameter {name!r} has shape {tuple(p.shape)} "
                                 "(give the others to AdamW)")
        moments = torch.bfloat16 if self._use_bfloat16_moments else None
        return MomentumParamGroup(params, zeros_like_all(params, moments), step_counters(params))

    @torch.no_grad()
    def step(self, param_group, grads):
        for name, p, g in self._grads_for(param_group, grads):
            buf = param_group.opt_state_m[name]
            g = g.float()
            b32 = buf.float().lerp(g, 1 - self._momentum)  # out of place (float32 buffers)
            buf.copy_(b32)
            update = g.lerp(b32, self._momentum) if self._nesterov else b32
            update = _muon._zeropower_via_newtonschulz(update, self._ns_coefficients, self._ns_steps, self._eps)
            adjusted = _muon._adjust_lr(self._lr, self._adjust_lr_fn, p.shape)
            p.mul_(1 - self._lr * self._weight_decay)
            p.add_(update.to(p.dtype), alpha=-adjusted)
        for t in {id(t): t for t in param_group.opt_steps.values()}.values():
            t.add_(1)
        return param_group
