"""Backward passes of tpu tensors on the thread that asks for them, as for CPU tensors.

PyTorch's autograd engine runs the backward of a non-CPU tensor on a thread of its own per
device index (``pt_autograd_<i>``) while the calling thread sleeps until that thread is done. For
CUDA that thread lets the host queue kernels of several devices at once; for ours it buys
nothing - a backward op only queues device work, and the caller waits either way - and costs two
thread wake-ups per ``backward()``/``autograd.grad()``: a metadata-only ``autograd.grad`` on tpu
took ~105 us against ~15 us on the caller's thread (2026-12-05, this 2-core VM), about 7% of a
small compiled training step (zoo mlp/small 1.07-1.11x, gpt/small 1.08x).

So on the thread that imports torch_tpu (the script's main thread, which runs nearly every
training loop) PyTorch's ``torch.autograd.set_multithreading_enabled`` is turned off: the engine
then runs every backward of that thread on the thread itself, CPU and tpu alike. The setting is
PyTorch's own, per thread, and ``torch.autograd.set_multithreading_enabled(True)`` restores the
device threads where wanted; other threads keep PyTorch's default (torch_tpu.distributed's rank
threads turn it off for themselves). ``TORCH_TPU_AUTOGRAD_DEVICE_THREADS=1`` keeps PyTorch's
default on the importing thread too.
"""

import os

import torch

ENV = "TORCH_TPU_AUTOGRAD_DEVICE_THREADS"


def keeps_device_threads() -> bool:
    """Whether the environment keeps PyTorch's autograd device threads on the importing thread
    (the project's rule for switches, as ``common/env_flag.h``: set to anything but "" or "0")."""
    return os.environ.get(ENV, "") not in ("", "0")


def install() -> bool:
    """Turns the engine's device threads off for the calling thread unless the environment
    keeps them; returns whether it did."""
    if keeps_device_threads():
        return False
    torch.autograd.set_multithreading_enabled(False)
    return True
