"""``torch.tpu``: the device module of the ``tpu`` device, shaped like ``torch.cuda``, plus the
original TorchTPU's controls (eager modes, precision, compiler options) and submodules
(``compiler``, ``ops``, ``distributed``, ``pallas``).

Its public names come from one table, ``torch_tpu._public_api.PUBLIC``: each is imported from
the file that holds it on first use. The files here hold them by concern: ``_device`` (devices),
``memory``, ``random``, ``streams``, ``cache`` (the compilation cache), ``modes`` (eager modes),
``precision_control`` and ``compiler_options``.
"""

from .. import _C
from .._public_api import install as _install


def _is_in_bad_fork():
    """True in a process forked after its parent used the tpu device (as torch.cuda's): its first
    device use raises RuntimeError; use the 'spawn' start method instead."""
    return _C._is_in_bad_fork()


_install(__import__(__name__, fromlist=["_"]))
