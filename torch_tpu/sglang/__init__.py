"""SGLang on the ``tpu`` device: an out-of-tree SGLang platform and its plugin.

SGLang (0.5.21) loads out-of-tree platforms from the ``sglang.srt.platforms`` entry-point group
(``torch_tpu = torch_tpu.sglang:activate``) in every one of its processes, during ``import
sglang``, and general plugins from ``sglang.srt.plugins`` (``torch_tpu.sglang:register_hooks``)
in the launcher and each scheduler process before the model is built.

* ``activate`` installs the torchvision guard (``torchvision_guard``), adds ``tpu`` to the
  attention-backend choices, and answers with the platform's qualified name when the device is
  available (``TORCH_TPU_SGLANG=0`` declines, e.g. to run SGLang's own CPU path).
* ``register_hooks`` registers the ``tpu`` attention backend and SGLang ``HookRegistry`` hooks:
  request bookkeeping on the host (``ReqToTokenPool`` on the CPU), the KV-cache budget
  (``torch_tpu.serving.memory``), SGLang's name-based Triton gate answering no for ``tpu``, and
  the model worker's step running as one device program (``step_runner``).
"""

import os

PLATFORM_QUALNAME = "torch_tpu.sglang.platform.TpuSRTPlatform"
BACKEND_NAME = "tpu"


def _enabled() -> bool:
    return os.environ.get("TORCH_TPU_SGLANG", "1") != "0"


def activate():
    """SGLang's platform entry point: the qualified name of our platform, or None."""
    if not _enabled():
        return None
    from . import torchvision_guard

    torchvision_guard.install()
    from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES, add_attention_backend_choices

    if BACKEND_NAME not in ATTENTION_BACKEND_CHOICES:
        add_attention_backend_choices([BACKEND_NAME])
    import torch
    import torch_tpu  # noqa: F401  (registers the device)

    if not torch.tpu.is_available():
        return None
    return PLATFORM_QUALNAME


def register_hooks():
    """SGLang's general-plugin entry point (runs only when our platform is the active one)."""
    if not _enabled():
        return
    from sglang.srt.platforms import current_platform

    if type(current_platform).__module__ != PLATFORM_QUALNAME.rsplit(".", 1)[0]:
        return
    from . import hooks

    hooks.register()
