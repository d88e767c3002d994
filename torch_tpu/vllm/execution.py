"""How vLLM's steps run on ``tpu``: ``TORCH_TPU_VLLM_MODE`` chooses the model runner.

* ``program`` (default): the step runner of ``model_runner.py`` - input preparation, model
  forward, logits and sampler of a step as one compiled program per bucket, replayed from C++,
  with one packed upload and one read per step, and asynchronous scheduling.

The other modes run vLLM's own GPU model runner (``legacy_runner.py``: its input preparation
and sampler op by op) and choose how the model forward runs:

* ``fused``: the forward is recorded in Fused Eager and leaves the mode at its end,
  which runs it as one compiled program (one per bucketed shape, cached). Nothing in the
  forward reads the device from the host, so the graph is not cut. The sampler is recorded
  the same way; its graph runs when the sampled tokens are read on the host (the step's one
  read). Only the logits projection between the two runs op by op.
* ``eager``: op by op in the current eager mode (Strict unless ``TORCH_TPU_DEFER_AND_FUSE=1``).
* ``compile``: ``torch.compile(model, backend="tpu", dynamic=False)``, with the attention
  layers (which read the per-step metadata from vLLM's forward context) left to eager, so
  each layer's projections and MLP are compiled graphs between attention calls.
"""

import contextlib
import os

MODES = ("program", "fused", "eager", "compile")
LEGACY_MODES = ("fused", "eager", "compile")
ENV = "TORCH_TPU_VLLM_MODE"
DEFAULT = "program"


def selected_mode() -> str:
    mode = os.environ.get(ENV, DEFAULT).strip().lower() or DEFAULT
    if mode not in MODES:
        raise ValueError(f"{ENV}={mode!r} is not one of {', '.join(MODES)}")
    return mode


class _Eager:
    name = "eager"

    def __call__(self, model, **inputs):
        return model(**inputs)

    def sampling(self):
        return contextlib.nullcontext()


class _Fused:
    name = "fused"

    def __call__(self, model, **inputs):
        # Leaving the mode flushes the recorded forward as one program.
        with self.sampling():
            return model(**inputs)

    def sampling(self):
        from torch_tpu.execution_mode import EagerMode, mode

        return mode(EagerMode.FUSED)


class _Compiled(_Eager):
    name = "compile"

    def __init__(self):
        self._compiled = {}

    def __call__(self, model, **inputs):
        fn = self._compiled.get(id(model))
        if fn is None:
            fn = self._compiled[id(model)] = _compile(model)
        return fn(**inputs)


def _compile(model):
    import torch
    from vllm.model_executor.layers.attention.attention import Attention

    # Attention reads the step's metadata (index tensors) from the forward context, which a
    # compiled graph would bake in: keep it out of the graphs.
    for module in model.modules():
        if isinstance(module, Attention) and not getattr(module, "_tpu_eager_forward", False):
            module.forward = torch.compiler.disable(module.forward, recursive=True)
            module._tpu_eager_forward = True
    return torch.compile(model, backend="tpu", dynamic=False)


def forward_runner():
    """The callable that runs ``model(**inputs)`` in the selected legacy mode."""
    mode = selected_mode()
    if mode not in LEGACY_MODES:
        raise ValueError(f"{ENV}={mode!r}: the model forward runs inside the step program")
    return {"fused": _Fused, "eager": _Eager, "compile": _Compiled}[mode]()
