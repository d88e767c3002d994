"""``torch.tpu.distributed.spmd_safe``: a function or block whose op stream is the same on every
rank (the same device ops and collectives, in the same order, with the same shapes).

Used as ``@spmd_safe`` or ``with spmd_safe():``. The region's inputs and outputs are
materialised at its edges without waiting (recorded Fused Eager work is launched, so nothing from
outside fuses with the region's graphs). Inside it, in Fused Eager on the device transport, the
collectives whose work is the same on every rank (all_reduce, all_gather, reduce_scatter,
broadcast, an even all_to_all) are recorded into the surrounding graph: the rank's graph runs as
one program with StableHLO collectives, and before launching it the ranks compare its
fingerprint, so a rank that broke the promise gets a clear error instead of a hang. Outside the region (and in Strict Eager)
each collective ends the graph and runs as a program of its own, as always; on the host transport
the region runs that way too, with a one-time note. Under ``torch.compile`` the decorated
function's FX nodes are annotated ``spmd_safe`` (custom metadata) where this PyTorch supports
annotations; compiled graphs record their collectives in any case (dynamo/graph_runner.py).
"""

import contextlib
import functools
import warnings

import torch

from .. import _C, execution_mode

METADATA_KEY = "spmd_safe"


def in_spmd_safe_region() -> bool:
    """Whether this thread is inside an ``spmd_safe`` region."""
    return _C._in_spmd_safe_region()  # the runtime's own per-thread depth


def _traced_here() -> bool:
    """Whether the region is being traced into a graph on this thread (an FX annotation then)
    rather than run. Dynamo folds ``is_dynamo_compiling()`` to True while it traces; export's
    tracing sets ``is_compiling()``, which is one process-wide flag - also True while another
    thread compiles (another rank, when ranks are threads) - so outside Dynamo it counts only with
    a tracing context on this thread."""
    if torch.compiler.is_dynamo_compiling():
        return True
    if not torch.compiler.is_compiling():
        return False
    from torch._guards import TracingContext

    return TracingContext.try_get() is not None


@contextlib.contextmanager
def _region():
    if _traced_here():
        annotate = getattr(getattr(torch.fx, "traceback", None), "annotate", None)
        with annotate({METADATA_KEY: True}) if annotate is not None else contextlib.nullcontext():
            yield
        return
    execution_mode.flush()  # launched, not awaited: nothing before the region fuses into it
    _note_host_transport()
    _C._spmd_safe_region(1)
    try:
        yield
    finally:
        _C._spmd_safe_region(-1)
        execution_mode.flush()


_noted_host = False


def _note_host_transport():
    """One note per process when the default group's collectives go over the host."""
    global _noted_host
    if _noted_host:
        return
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        transport = _C._dist_transport(dist.distributed_c10d._get_default_group()._get_backend(torch.device("tpu")))
    except RuntimeError:
        return
    if transport == "host":
        _noted_host = True
        warnings.warn("torch.tpu.distributed.spmd_safe: the process group uses the host transport, whose "
                      "collectives run on the CPU between programs; the region runs as outside it, cut at "
                      "each collective (collectives inside programs need the device transport).", stacklevel=4)


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
