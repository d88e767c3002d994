"""``SingleTraceTrainer``: a whole training step - forward, loss, backward and the optimizer
update - as one device program per batch shape.

    trainer = torch.tpu.optimizers.SingleTraceTrainer(model, torch.tpu.optimizers.AdamW(lr=1e-3))
    step = trainer.make_compiled_train_step(example_inputs, example_targets)
    for x, y in batches:
        loss = step(x, y)          # one program launch; read loss.item() only when needed

The first call of a batch shape runs the step eagerly in Fused Eager capture mode (its results
are real), which records every op - the forward, autograd's backward, the optimizer's update -
into one graph, compiled once (torch_tpu/captured.py). Every later call replays that program
from C++ with the new batch: the parameters (the model's own tensors), the optimizer state and
the model's buffers are its inputs and are updated in place, their buffers donated, so nothing is
copied and the model always holds the trained weights. A step that draws random numbers
(dropout) or reads device data on the host cannot be replayed as captured: it is recorded again
every step (still one program per step; a warning says why once).

The loss is ``compute_loss_fn(model, args, kwargs)`` when given; otherwise, as in the original,
the mean squared error against the targets, or the model output's ``loss``, or the mean of its
``logits`` / ``sample`` / first tensor. Inputs are a tensor, a tuple/list of positional arguments
or a dict of keyword arguments. Without an optimizer the step computes the gradients and stores
them in each parameter's ``.grad``.

Without a ``compile_fn`` (the original requires one) torch_tpu captures and compiles the step
itself as above. With one, as in the original, the step is traced into an FX graph (``make_fx``,
once per batch layout) that is handed to ``compile_fn`` and whose result runs every step
(torch_tpu/optimizers/traced_step.py): the caller decides how the step is compiled.
"""

import torch
from torch.utils import _pytree

from ..captured import CapturedPrograms
from .base import named_params
from .traced_step import TracedSteps


def _default_loss(out, targets):
    if targets is not None:
        return torch.nn.functional.mse_loss(out, targets)
    for field in ("loss",):
        value = out.get(field) if isinstance(out, dict) else getattr(out, field, None)
        if isinstance(value, torch.Tensor):
            return value
    for field in ("logits", "sample"):
        value = out.get(field) if isinstance(out, dict) else getattr(out, field, None)
        if isinstance(value, torch.Tensor):
            return value.mean()
    for leaf in _pytree.tree_leaves(out):
        if isinstance(leaf, torch.Tensor):
            return leaf.mean()
    raise TypeError(f"SingleTraceTrainer: cannot find a loss in the model's output of type {type(out).__name__}; "
                    "pass compute_loss_fn")


def _call_args(inputs):
    if isinstance(inputs, dict):
        return (), inputs
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


class SingleTraceTrainer:
    """Runs ``model``'s training step with ``optimizer`` as one program (see the module docstring)."""

    def __init__(self, model, optimizer=None, compile_fn=None, compute_loss_fn=None):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"SingleTraceTrainer expects an nn.Module, got {type(model).__name__}")
        if compile_fn is not None and not callable(compile_fn):
            raise TypeError("SingleTraceTrainer: compile_fn must be callable")
        tie = getattr(model, "tie_weights", None)
        if callable(tie):
            tie()
        self._model = model
        self._optimizer = optimizer
        self._compile_fn = compile_fn
        self._compute_loss_fn = compute_loss_fn
        self._names = {name.replace(".", "_"): name for name, _ in model.named_parameters()}
        params = named_params(model)
        self._param_group = optimizer.init_param_group(params) if optimizer is not None else params
        self._programs = CapturedPrograms(f"SingleTraceTrainer({type(model).__name__})")

    @property
    def param_group(self):
        """The parameters and optimizer state the step updates (the optimizer's ``ParamGroup``,
        or the parameters' dict without an optimizer)."""
        return self._param_group

    @property
    def params(self):
        """``{original name: parameter}``."""
        group = getattr(self._param_group, "params", self._param_group)
        return {self._names[k]: v for k, v in group.items()}

    @property
    def stats(self):
        """Captures, replays and re-recorded steps of the step programs."""
        return dict(self._programs.stats)

    def make_compiled_train_step(self, example_inputs, example_targets=None, compile_fn=None):
        """The training step: ``step(inputs, targets=None) -> loss`` (a device tensor)."""
        if compile_fn is not None and not callable(compile_fn):
            raise TypeError("make_compiled_train_step: compile_fn must be callable")
        with_targets = example_targets is not None
        names = list(getattr(self._param_group, "params", self._param_group))
        module_params = dict(self._model.named_parameters())
        param_list = [module_params[self._names[k]] for k in names]  # what autograd differentiates
        state, seen = [], set()  # parameters, optimizer state, buffers: each storage once
        for t in [*_pytree.tree_leaves(self._param_group), *self._model.buffers()]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
                seen.add(t.untyped_storage().data_ptr())
                state.append(t)

        def loss_and_grads(batch_leaves, spec, diff_params):
            inputs, targets = _pytree.tree_unflatten(batch_leaves, spec)
            args, kwargs = _call_args(inputs)
            with torch.enable_grad():
                if self._compute_loss_fn is not None:
                    loss = self._compute_loss_fn(self._model, args, kwargs)
                else:
                    loss = _default_loss(self._model(*args, **kwargs), targets)
                grads = torch.autograd.grad(loss, diff_params, allow_unused=True)
            return loss, [torch.zeros_like(p) if g is None else g for p, g in zip(diff_params, grads)]

        def run(batch_leaves, spec):
            loss, grads = loss_and_grads(batch_leaves, spec, param_list)
            if self._optimizer is not None:
                self._optimizer.step(self._param_group, dict(zip(names, grads)))
                return [loss.detach()]
            return [loss.detach(), *grads]

        compile_fn = compile_fn if compile_fn is not None else self._compile_fn
        traced = None if compile_fn is None else TracedSteps(
            compile_fn, self._model, self._optimizer, self._param_group, state, names,
            [self._names[k] for k in names], loss_and_grads)

        def train_step(inputs, targets=None):
            if (targets is not None) != with_targets:
                raise ValueError("train_step: pass targets exactly when make_compiled_train_step was given "
                                 "example_targets")
            leaves, spec = _pytree.tree_flatten((inputs, targets))
            tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
            for t in tensors:
                if t.device.type != "tpu":
                    raise ValueError(f"train_step: batch tensors must be on tpu, got one on {t.device}; move the "
                                     "batch with .to('tpu')")
            key = (str(spec), tuple((tuple(t.shape), t.dtype, t.stride()) for t in tensors),
                   tuple(repr(x) for x in leaves if not isinstance(x, torch.Tensor)))

            def step_fn(*flat):
                batch = list(flat[:len(tensors)])
                it = iter(batch)
                full = [next(it) if isinstance(x, torch.Tensor) else x for x in leaves]
                return run(full, spec)

            if traced is not None:
                outs = traced.run(key, tensors, leaves, spec)
            else:
                outs = self._programs.run(key, step_fn, tensors + state)
            if self._optimizer is None:
                for p, g in zip(param_list, outs[1:]):
                    p.grad = g
            return outs[0]

        return train_step
