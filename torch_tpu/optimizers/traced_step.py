"""SingleTraceTrainer's step as an FX graph for a ``compile_fn``, the original's callback.

Given a ``compile_fn``, the trainer traces its whole step - forward, loss, backward and the
optimizer update - with ``make_fx`` on fake tensors, once per batch layout: a graph whose inputs
are the batch's tensors followed by the step's state (parameters, optimizer state, buffers, each
storage once) and whose outputs are the loss (and, without an optimizer, the gradients). The
update is in-place ops on the state inputs, so whatever ``compile_fn`` makes of the graph - the
graph itself, ``torch.compile(graph, backend="tpu")``, a pass of the caller's - updates the
model's own tensors when it runs. ``compile_fn(graph, example_inputs)`` or ``compile_fn(graph)``
is called, as its signature asks, and its result is called with the inputs on every step.
"""

import inspect

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.utils import stateless
from torch.utils import _pytree


def call_compile_fn(compile_fn, graph, example_inputs):
    """``compile_fn(graph)`` when it takes one positional argument, else
    ``compile_fn(graph, example_inputs)``."""
    try:
        params = list(inspect.signature(compile_fn).parameters.values())
    except (TypeError, ValueError):  # no signature (a builtin, some C callables)
        return compile_fn(graph, example_inputs)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) == 1 and not any(p.kind == p.VAR_POSITIONAL for p in params):
        return compile_fn(graph)
    return compile_fn(graph, example_inputs)


def _view_key(t):
    return t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride()


class TracedSteps:
    """The compiled step per batch layout. ``loss_and_grads(batch_leaves, spec, diff_params)``
    computes the loss and the gradients of ``diff_params`` with the model as it is."""

    def __init__(self, compile_fn, model, optimizer, param_group, state, names, dotted, loss_and_grads):
        self._compile_fn = compile_fn
        self._model, self._optimizer, self._group = model, optimizer, param_group
        self._state, self._names, self._dotted = state, names, dotted
        self._loss_and_grads = loss_and_grads
        self._steps = {}

    def run(self, key, tensors, leaves, spec):
        step = self._steps.get(key)
        if step is None:
            step = self._steps[key] = self._trace(tensors, leaves, spec)
        out = step(*tensors, *self._state)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def _trace(self, tensors, leaves, spec):
        index = {_view_key(t): i for i, t in enumerate(self._state)}

        def at(t):
            i = index.get(_view_key(t))
            if i is None:
                raise ValueError("SingleTraceTrainer with a compile_fn: the parameters, optimizer state and buffers "
                                 "must not be different views of one storage; drop compile_fn to capture the step "
                                 "as one program instead")
            return i

        group_leaves, group_spec = _pytree.tree_flatten(self._group)
        group_at = [at(t) if isinstance(t, torch.Tensor) else None for t in group_leaves]
        params_at = {name: at(p) for name, p in self._model.named_parameters()}
        buffers_at = {name: at(b) for name, b in self._model.named_buffers()}
        n = len(tensors)

        def step(*flat):
            batch, state = iter(flat[:n]), flat[n:]
            full = [next(batch) if isinstance(x, torch.Tensor) else x for x in leaves]
            diff = {name: state[i].detach().requires_grad_() for name, i in params_at.items()}
            swapped = {**diff, **{name: state[i] for name, i in buffers_at.items()}}
            with stateless._reparametrize_module(self._model, swapped):
                loss, grads = self._loss_and_grads(full, spec, [diff[d] for d in self._dotted])
            if self._optimizer is None:
                return (loss.detach(), *grads)
            group = _pytree.tree_unflatten(
                [leaf if i is None else state[i] for i, leaf in zip(group_at, group_leaves)], group_spec)
            self._optimizer.step(group, dict(zip(self._names, grads)))
            return (loss.detach(),)

        example = [*tensors, *self._state]
        graph = make_fx(step, tracing_mode="fake")(*example)
        return call_compile_fn(self._compile_fn, graph, example)
