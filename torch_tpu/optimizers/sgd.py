"""``Sgd``: torch.optim.SGD's update (momentum, dampening, Nesterov, weight decay, maximize),
with the momentum buffer on the device from the start: the first step sets it to the gradient,
as torch.optim.SGD does when it creates the buffer, through the device step count."""

import torch

from .base import MomentumParamGroup, Once, Optimizer, named_params, step_counters, zeros_like_all


class Sgd(Optimizer):
    ParamGroup = MomentumParamGroup
    HYPERPARAMETERS = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize", "foreach", "fused",
                       "grad_scale", "found_inf", "has_sparse_grad")

    def __init__(self, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False,
                 foreach=False, fused=True, grad_scale=None, found_inf=None, has_sparse_grad=False):
        super().__init__(lr=lr, weight_decay=weight_decay)
        if momentum < 0:
            raise ValueError(f"Sgd: momentum must be >= 0, got {momentum}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Sgd: Nesterov momentum requires a momentum and zero dampening")
        if grad_scale is not None or found_inf is not None:
            raise ValueError("torch.tpu.optimizers.Sgd takes unscaled gradients; unscale them before the step")
        if has_sparse_grad:
            raise ValueError("torch.tpu.optimizers.Sgd takes dense gradients (has_sparse_grad=False)")
        self._momentum, self._dampening, self._nesterov, self._maximize = momentum, dampening, nesterov, maximize
        self._foreach, self._fused = foreach, fused  # accepted; the update is one per-tensor formula
        self._grad_scale, self._found_inf, self._has_sparse_grad = grad_scale, found_inf, has_sparse_grad

    def init_param_group(self, params):
        params = named_params(params)
        momentum = zeros_like_all(params) if self._momentum else {}
        return MomentumParamGroup(params, momentum, step_counters(params))

    @torch.no_grad()
    def step(self, param_group, grads):
        first = Once(lambda t: t == 0)  # read before this step's increment
        for name, p, g in self._grads_for(param_group, grads):
            t = param_group.opt_steps[name]
            is_first = first(t)
            g = -g if self._maximize else g
            if self._weight_decay:
                g = g.add(p, alpha=self._weight_decay)
            if self._momentum:
                buf = param_group.opt_state_m[name]
                blended = buf.mul(self._momentum).add_(g, alpha=1 - self._dampening)
                buf.copy_(torch.where(is_first, g, blended))  # the first step starts the buffer at g
                g = g.add(buf, alpha=self._momentum) if self._nesterov else buf
            p.sub_(g, alpha=self._lr)
        for t in {id(t): t for t in param_group.opt_steps.values()}.values():
            t.add_(1)
        return param_group
