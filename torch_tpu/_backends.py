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


_module = types.ModuleType("torch.backends.tpu", __doc__)
_module.is_available = is_available
_module.is_built = is_built
sys.modules["torch.backends.tpu"] = _module
torch.backends.tpu = _module
