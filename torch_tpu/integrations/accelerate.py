"""accelerate on ``tpu``: the device its ``PartialState`` picks.

accelerate decides a process's device in ``PartialState.default_device``, a fixed list (MPS,
MLU, ..., CUDA, XPU, ...) ending in the CPU; it does not ask ``torch.accelerator``. Transformers'
``TrainingArguments`` does, and puts the batches on ``tpu:0`` while ``Accelerator.prepare``
moves the model back to the CPU: Hugging Face's ``Trainer`` with default arguments then fails
with "Expected all tensors to be on the same device". This module wraps ``default_device`` so
that where accelerate would fall back to the CPU and a ``tpu`` device is available, it answers
``tpu:<current device>``; ``use_cpu=True`` (accelerate's ``cpu=True``) and
``ACCELERATE_TORCH_DEVICE`` still win, because accelerate consults them before
``default_device``. The wrapper is installed when ``accelerate.state`` is imported, whether that
happens before or after torch_tpu.
"""

import importlib.abc
import importlib.util
import sys

import torch

_MODULE = "accelerate.state"


def _tpu_or(device):
    if device.type == "cpu" and torch.tpu.is_available():
        return torch.device("tpu", torch.tpu.current_device())
    return device


def patch(state_module) -> None:
    cls = state_module.PartialState
    original = cls.__dict__.get("default_device")
    if not isinstance(original, property) or getattr(original.fget, "_torch_tpu", False):
        return

    def default_device(self):
        return _tpu_or(original.fget(self))

    default_device._torch_tpu = True
    default_device.__doc__ = original.fget.__doc__
    cls.default_device = property(default_device)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)  # find the real module once, then step aside
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


_finder = _Finder()


def install() -> None:
    if _MODULE in sys.modules:
        patch(sys.modules[_MODULE])
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
