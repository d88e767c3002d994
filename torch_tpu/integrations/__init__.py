"""Hooks that make libraries which choose a device by name list choose ``tpu``, applied when
those libraries are imported (before or after torch_tpu): ``accelerate`` (the device of
Hugging Face's Trainer and Accelerator)."""

from . import accelerate as _accelerate

_accelerate.install()
