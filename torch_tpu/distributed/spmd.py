"""``torch.tpu.distributed.spmd_safe``: a function or block whose op stream is the same on every
rank (the same device ops and collectives, in the same order, with the same shapes).

Used as ``@spmd_safe`` or ``with spmd_safe():``. The region's inputs and outputs are
materialised at its edges without waiting (recorded Fused Eager work is launched, so nothing from
outside fuses with the region's graphs), and ``in_spmd_safe_region()`` tells the runtime that the
promise holds inside it. Today collectives still run as their own programs between the region's
graphs - the behaviour outside the region, always safe; recording them into the surrounding
Fused Eager graphs (one program per rank with StableHLO collectives) is the distributed round-2
work that builds on this marker. Under ``torch.compile`` the decorated function's FX nodes are
annotated ``spmd_safe`` (custom metadata) where this PyTorch supports annotations.
"""

import contextlib
import functools
import threading

import torch

from .. import execution_mode

_state = threading.local()
METADATA_KEY = "spmd_safe"


def in_spmd_safe_region() -> bool:
    """Whether this thread is inside an ``spmd_safe`` region."""
    return getattr(_state, "depth", 0) > 0


@contextlib.contextmanager
def _region():
    if torch.compiler.is_compiling():
        annotate = getattr(getattr(torch.fx, "traceback", None), "annotate", None)
        with annotate({METADATA_KEY: True}) if annotate is not None else contextlib.nullcontext():
            yield
        return
    execution_mode.flush()  # launched, not awaited: nothing before the region fuses into it
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1
        execution_mode.flush()


def spmd_safe(func=None):
    """``@spmd_safe`` on a function, or ``with spmd_safe():`` around a block (see the module
    docstring for the promise it makes)."""
    if func is None:
        return _region()
    if not callable(func):
        raise TypeError(f"spmd_safe decorates a function (or is used as spmd_safe()), got {type(func).__name__}")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with _region():
            return func(*args, **kwargs)

    return wrapper
