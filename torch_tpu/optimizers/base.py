"""What the functional optimizers share: hyperparameters, parameter naming, the state pytree."""

import abc
import dataclasses
import types

import torch
from torch.utils import _pytree


def named_params(params):
    """``{name: tensor}`` of a module's parameters (dots become underscores, as in the original)
    or of a given dict. The tensors are the parameters themselves, detached: updating them in
    place updates the model."""
    if isinstance(params, torch.nn.Module):
        return {name.replace(".", "_"): p.detach() for name, p in params.named_parameters()}
    if not isinstance(params, dict):
        raise TypeError(f"init_param_group expects an nn.Module or a dict of tensors, got {type(params).__name__}")
    return dict(params)


def register_group(cls):
    """Makes a ParamGroup dataclass a pytree node (its dict fields are its children)."""
    fields = [f.name for f in dataclasses.fields(cls)]
    _pytree.register_pytree_node(
        cls,
        lambda g: ([getattr(g, f) for f in fields], None),
        lambda children, _ctx: cls(*children),
        serialized_type_name=f"torch_tpu.optimizers.{cls.__qualname__}",
    )
    return cls


@register_group
@dataclasses.dataclass
class MomentumParamGroup:
    """Parameters, one momentum buffer each and the step counts (Sgd's and Muon's state)."""

    params: dict
    opt_state_m: dict = dataclasses.field(default_factory=dict)
    opt_steps: dict = dataclasses.field(default_factory=dict)


def zeros_like_all(params, dtype=None):
    return {name: torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format) for name, p in params.items()}


def step_counters(params):
    """``{name: step count}``: one float32 device scalar per device, shared by its parameters (they
    always step together), so a step increments it and computes the bias corrections once."""
    shared = {}
    for p in params.values():
        if p.device not in shared:
            shared[p.device] = torch.zeros((), dtype=torch.float32, device=p.device)
    return {name: shared[p.device] for name, p in params.items()}


class Once:
    """Per optimizer step: runs ``fn(counter)`` once per distinct step counter (shared counters
    are incremented once) and remembers its result."""

    def __init__(self, fn):
        self.fn = fn
        self.done = {}

    def __call__(self, counter):
        key = id(counter)
        if key not in self.done:
            self.done[key] = self.fn(counter)
        return self.done[key]


class Optimizer(abc.ABC):
    """A functional optimizer: hyperparameters fixed at construction (a traced step bakes them
    in; make a new optimizer to change them), state in the ``ParamGroup`` it creates."""

    HYPERPARAMETERS = ("lr", "weight_decay")

    def __init__(self, lr: float = 1e-3, weight_decay: float = 0.0):
        if lr < 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {lr}")
        if weight_decay < 0:
            raise ValueError(f"{type(self).__name__}: weight_decay must be >= 0, got {weight_decay}")
        self._lr = lr
        self._weight_decay = weight_decay

    @property
    def defaults(self):
        """The hyperparameters, read-only."""
        return types.MappingProxyType({n: getattr(self, "_" + n) for n in self.HYPERPARAMETERS})

    @abc.abstractmethod
    def init_param_group(self, params):
        """A fresh ``ParamGroup`` for an ``nn.Module``'s parameters or a dict of tensors."""

    @abc.abstractmethod
    def step(self, param_group, grads):
        """Updates ``param_group`` in place from ``grads`` (``{name: tensor}``) and returns it."""

    def __call__(self, param_group, grads):
        return self.step(param_group, grads)

    def _grads_for(self, param_group, grads):
        missing = [k for k in param_group.params if k not in grads]
        if missing:
            raise KeyError(f"{type(self).__name__}.step: no gradient for {missing[:4]}")
        return [(k, param_group.params[k], grads[k]) for k in param_group.params]
