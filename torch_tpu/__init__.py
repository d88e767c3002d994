"""torch_tpu: a PyTorch device called ``tpu`` whose memory and computation live in a PJRT
plugin - Google TPUs through libtpu, NVIDIA GPUs through the XLA CUDA plugin, and (the
default) the CPU through the XLA CPU plugin.

``import torch_tpu`` registers the device; then ``model.to("tpu")`` works like ``"cuda"``.
"""

import os as _os

# XLA logs INFO lines on start-up; keep them out of user output unless asked for.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import torch  # noqa: E402

from . import _plugin  # noqa: E402
from . import _C  # noqa: E402

_C._set_default_plugin_path(_plugin.default_plugin_path() or "")
# Raised at the first device use when TORCH_TPU_PLATFORM's plugin is not installed.
_C._set_plugin_search_error(_plugin.plugin_search_error() or "")

torch.utils.rename_privateuse1_backend("tpu")

from . import tpu  # noqa: E402

torch._register_device_module("tpu", tpu)
torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)

from . import _meta_compat  # noqa: E402

_meta_compat.install()  # shape kernels older torch versions lack (fake tensors under compile)

from . import _backends  # noqa: E402,F401  (torch.backends.tpu)
from . import distributed  # noqa: E402  (the tpu_dist backend of torch.distributed)
from . import execution_mode  # noqa: E402
from . import _clean_exit  # noqa: E402,F401  (autograd device threads released before exit)
from . import _multiprocessing  # noqa: E402
from . import _autograd_thread  # noqa: E402
from . import integrations  # noqa: E402,F401  (accelerate picks tpu)

_multiprocessing.install()  # tpu tensors through torch.multiprocessing queues (as values)
_autograd_thread.install()  # this thread's backward passes run on it, not on a device thread

# torch.autocast("tpu") without a dtype uses bfloat16, the accelerator's native reduced type.
torch.set_autocast_dtype("tpu", torch.bfloat16)
from ._fallback import (  # noqa: E402
    fallback_counts,
    get_fallback_mode,
    reset_fallback_counts,
    set_fallback_mode,
)

__version__ = "0.1.0"

__all__ = [
    "distributed",
    "execution_mode",
    "fallback_counts",
    "get_fallback_mode",
    "reset_fallback_counts",
    "set_fallback_mode",
    "tpu",
]
