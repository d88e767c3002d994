"""``torch.backends.tpu``: mirrors ``torch.backends.cuda`` for what a user checks."""

import sys
import types

import torch

from . import _C


def is_available():
    """True when a PJRT plugin is loaded (or loadable) and reports at least one device."""
    return _C._device_count() > 0


def is_built():
    """torch_tpu is built into this process (it always is, once imported)."""
    return True


class _MatmulPrecision:
    """``torch.backends.tpu.matmul.allow_tf32``: whether float32 matrix products may use
    TF32-class precision (XLA DEFAULT: TF32 on NVIDIA GPUs, one bf16 pass on TPUs) instead of
    exact float32 (HIGHEST). Like ``torch.backends.cuda.matmul.allow_tf32`` it is PyTorch's
    process-wide float32 matmul precision: ``torch.set_float32_matmul_precision("high")`` or
    ``("medium")`` and ``torch.backends.cuda.matmul.fp32_precision = "tf32"`` turn it on,
    ``("highest")`` / ``"ieee"`` off (PyTorch's default: off)."""

    @property
    def allow_tf32(self):
        # The per-backend getter works whichever API (legacy or fp32_precision) set it.
        return torch._C._get_fp32_precision_getter("cuda", "matmul") == "tf32"

    @allow_tf32.setter
    def allow_tf32(self, value):
        # The legacy setter, as torch.backends.cuda.matmul.allow_tf32 uses.
        torch._C._set_cublas_allow_tf32(bool(value))


class _ConvPrecision:
    """``torch.backends.tpu.conv.allow_tf32``: whether float32 convolutions may use XLA DEFAULT
    precision. torch_tpu's own switch, default False (exact), unlike cuDNN's default True: on a
    TPU DEFAULT means one bf16 pass. Read when an op is recorded, so a graph compiled by
    ``torch.compile`` keeps the setting it was compiled with."""

    @property
    def allow_tf32(self):
        return _C._conv_allow_tf32()

    @allow_tf32.setter
    def allow_tf32(self, value):
        _C._set_conv_allow_tf32(bool(value))


_module = types.ModuleType("torch.backends.tpu", __doc__)
_module.is_available = is_available
_module.is_built = is_built
_module.matmul = _MatmulPrecision()
_module.conv = _ConvPrecision()
sys.modules["torch.backends.tpu"] = _module
torch.backends.tpu = _module
