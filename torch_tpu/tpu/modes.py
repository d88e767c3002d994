"""``torch.tpu.EagerMode``, ``torch.tpu.eager_mode`` and ``torch.tpu.set_eager_mode``: the
original TorchTPU's spelling of the eager modes (torch_tpu.execution_mode holds the one enum;
DEFER_NEVER is STRICT, DEFER_AND_FUSE is FUSED, DEFER_NEVER_AND_LAUNCH_BLOCKING is DEBUG)."""

import contextlib

from .. import execution_mode
from .._compile_guard import forbidden_in_compile

EagerMode = execution_mode.EagerMode


def get_eager_mode() -> EagerMode:
    """The current eager mode (``torch.tpu.eager_mode``)."""
    return execution_mode.get_mode()


@forbidden_in_compile("a compiled graph is one program; it cannot choose how eager ops dispatch.")
def set_eager_mode_now(mode) -> None:
    """``torch.tpu.eager_mode = mode``: switches for good (recorded work runs first)."""
    execution_mode.set_mode(mode)


@forbidden_in_compile("a compiled graph is one program; it cannot choose how eager ops dispatch.")
@contextlib.contextmanager
def set_eager_mode(mode):
    """Runs a block in ``mode`` (an ``EagerMode``) and restores the previous mode afterwards."""
    with execution_mode.mode(mode):
        yield
