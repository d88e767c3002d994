"""The CPU fallback for ops without a tpu lowering."""

from . import _C


def fallback_counts():
    """{op name: number of calls} for every op that ran on the CPU instead of the device."""
    return dict(_C._fallback_counts())


def reset_fallback_counts():
    _C._reset_fallback_counts()


def set_fallback_mode(mode):
    """'warn' (default): run such ops on the CPU, warning once per op. 'error': raise instead.
    The environment variable TORCH_TPU_FALLBACK=error sets the initial mode."""
    _C._set_fallback_mode(mode)


def get_fallback_mode():
    return _C._get_fallback_mode()
