"""``torch.tpu.Precision``, ``torch.tpu.precision(mode)`` and ``torch.tpu.allow_excess_precision``.

``precision(mode)`` sets StableHLO's operand precision of the matrix products and convolutions
issued in the block - process-wide, like ``torch.set_float32_matmul_precision``, so the backward
ops autograd runs on its own thread follow it too: ``HIGHEST`` is exact float32, ``DEFAULT`` lets the hardware
use its fastest passes (one bf16 pass on a TPU, TF32 on NVIDIA GPUs), ``HIGH`` is in between
(3 bf16 passes on a TPU). It takes precedence over ``torch.set_float32_matmul_precision`` and
``torch.backends.tpu.conv.allow_tf32``, applies to every floating dtype, and is part of each
op's program signature, so Strict, Fused and torch.compile all honour it and programs built
under different precisions never share a cache entry. Inside a function being compiled the
block is a graph break (Dynamo cannot trace it; the frame runs eagerly, still at the chosen
precision); a compiled function *called* inside the block is compiled for that precision.
On the XLA CPU plugin every precision computes in float32.

``allow_excess_precision`` (process-wide) lets XLA keep intermediate values of reduced-precision
computations at a higher precision than PyTorch rounds them to (XLA's
``xla_allow_excess_precision``). Unset, it reads ``--xla_allow_excess_precision`` from
``XLA_FLAGS`` and otherwise reports XLA's own default, True. Setting it recompiles later programs.
"""

import contextlib
import enum
import os
import re

import torch

from .. import _C, execution_mode


class Precision(enum.IntEnum):
    """StableHLO's operand precision of dot_general and convolution."""

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2


@contextlib.contextmanager
def precision(mode: Precision):
    """Runs the block's matmuls and convolutions at ``mode`` (see the module docstring)."""
    torch._dynamo.graph_break()  # the block runs eagerly inside a compiled frame (documented)
    if not isinstance(mode, Precision):
        raise ValueError(
            f"torch.tpu.precision expects Precision.DEFAULT, Precision.HIGH or Precision.HIGHEST, got {mode!r}"
        )
    _C._push_precision(int(mode))
    try:
        yield
    finally:
        _C._pop_precision()


def current_precision():
    """The ``Precision`` of the innermost active ``precision`` block, or None."""
    p = _C._precision_override()
    return None if p < 0 else Precision(p)


_FLAG = re.compile(r"--xla_allow_excess_precision(?:=(\S+))?")


def get_allow_excess_precision() -> bool:
    setting = _C._allow_excess_precision_setting()
    if setting is not None:
        return setting
    m = None
    for m in _FLAG.finditer(os.environ.get("XLA_FLAGS", "")):
        pass  # the last occurrence wins, as in XLA's flag parser
    if m is not None:
        return (m.group(1) or "true").lower() in ("true", "1")
    return True  # XLA's default


def set_allow_excess_precision(value: bool) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"torch.tpu.allow_excess_precision must be a bool, got {type(value).__name__}")
    execution_mode.flush()  # recorded work compiles with the setting it was recorded under
    _C._set_allow_excess_precision(value)
