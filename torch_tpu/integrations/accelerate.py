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

Launched as several processes (``accelerate launch``, ``torchrun``), accelerate picks no
distributed backend for a device it does not know (``_prepare_backend`` answers ``NO`` unless
``cpu=True``), so each rank would train alone. Where a ``tpu`` device is available and the CPU
was not asked for, ``_prepare_backend`` answers accelerate's ``MULTI_CPU`` mode (DDP without
device ids, its launch environment) with the ``tpu_dist`` backend, and ``set_device`` gives
each process ``tpu:<local rank>``; a backend the caller names (``ddp_backend``) is kept.
"""

import importlib.abc
import importlib.util
import os
import sys

import torch

_MODULE = "accelerate.state"


def _tpu_or(device):
    if device.type == "cpu" and torch.tpu.is_available():
        return torch.device("tpu", torch.tpu.current_device())
    return device


def _launched_as_ranks() -> bool:
    return int(os.environ.get("LOCAL_RANK", -1)) != -1 or int(os.environ.get("WORLD_SIZE", 1)) > 1


def _wrap(cls, name, make):
    """Replaces ``cls.name`` by ``make(original)`` once."""
    original = cls.__dict__.get(name)
    target = original.fget if isinstance(original, property) else original
    if target is None or getattr(target, "_torch_tpu", False):
        return
    wrapper = make(target)
    wrapper._torch_tpu = True
    wrapper.__doc__ = target.__doc__
    setattr(cls, name, property(wrapper) if isinstance(original, property) else wrapper)


def patch(state_module) -> None:
    cls = state_module.PartialState
    distributed_type = state_module.DistributedType

    def default_device(original):
        return lambda self: _tpu_or(original(self))

    def prepare_backend(original):
        def wrapper(self, cpu=False, sagemaker_dp=False, backend=None):
            chosen, kind = original(self, cpu, sagemaker_dp, backend)
            if kind == distributed_type.NO and not cpu and _launched_as_ranks() and torch.tpu.is_available():
                return backend or "tpu_dist", distributed_type.MULTI_CPU
            return chosen, kind
        return wrapper

    def set_device(original):
        def wrapper(self):
            if self.device is None and not self._cpu and self.distributed_type == distributed_type.MULTI_CPU \
                    and torch.tpu.is_available():
                self.device = torch.device("tpu", self.local_process_index % torch.tpu.device_count())
                torch.tpu.set_device(self.device)
                return
            original(self)
        return wrapper

    _wrap(cls, "default_device", default_device)
    _wrap(cls, "_prepare_backend", prepare_backend)
    _wrap(cls, "set_device", set_device)


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
