"""Eager execution modes of the ``tpu`` device. Only *when* work runs changes, never results.

* ``EagerMode.STRICT`` (default): each op is enqueued and returns at once; the host waits only
  when it reads data (``.item()``, ``.cpu()``, ``print``, ``torch.tpu.synchronize()``). A device
  error surfaces at the next synchronisation and names the op it came from.
* ``EagerMode.DEBUG`` (``TPU_LAUNCH_BLOCKING=1``): every op waits for completion, so an error
  is raised at the Python line that caused it.
* ``EagerMode.FUSED`` (``TORCH_TPU_DEFER_AND_FUSE=1``): ops are recorded into a deferred graph
  that is compiled once per graph signature and replayed; it runs at a host read, a
  synchronize, a mode switch, the size limit (``TORCH_TPU_FUSE_MAX_OPS``) or when the recorded
  op sequence starts to repeat (a training-loop iteration).

    import torch_tpu
    from torch_tpu.execution_mode import EagerMode

    torch_tpu.execution_mode.set_mode(EagerMode.FUSED)
    with torch_tpu.execution_mode.mode(EagerMode.DEBUG):
        ...

The original TorchTPU's names are aliases of the same members: ``DEFER_NEVER`` is ``STRICT``,
``DEFER_AND_FUSE`` is ``FUSED`` and ``DEFER_NEVER_AND_LAUNCH_BLOCKING`` is ``DEBUG``
(``torch.tpu.EagerMode``, ``torch.tpu.eager_mode``, ``torch.tpu.set_eager_mode``).
"""

import contextlib
import enum

from . import _C


class EagerMode(enum.IntEnum):
    DEBUG = 0
    STRICT = 1
    FUSED = 2
    # The original TorchTPU's names (aliases: the same members).
    DEFER_NEVER_AND_LAUNCH_BLOCKING = 0
    DEFER_NEVER = 1
    DEFER_AND_FUSE = 2


def get_mode() -> EagerMode:
    """The current eager mode."""
    return EagerMode(_C._eager_mode())


def set_mode(mode) -> None:
    """Sets the eager mode (an ``EagerMode`` or its name). Recorded work is flushed first."""
    if isinstance(mode, str):
        try:
            mode = EagerMode[mode.upper()]
        except KeyError:
            raise ValueError(
                f"unknown eager mode {mode!r}; valid modes are "
                f"{', '.join(m.name for m in EagerMode)}"
            ) from None
    if not isinstance(mode, EagerMode):
        raise TypeError(f"set_mode expects an EagerMode, got {type(mode).__name__}")
    _C._set_eager_mode(int(mode))


@contextlib.contextmanager
def mode(new_mode):
    """Runs a block in ``new_mode`` and restores the previous mode afterwards."""
    previous = get_mode()
    set_mode(new_mode)
    try:
        yield
    finally:
        set_mode(previous)


def flush() -> None:
    """Runs the work recorded by Fused Eager now (a no-op in the other modes)."""
    _C._flush_pending()


def pending_ops() -> int:
    """How many ops Fused Eager has recorded and not yet run."""
    return _C._pending_ops()


__all__ = ["EagerMode", "flush", "get_mode", "mode", "pending_ops", "set_mode"]
