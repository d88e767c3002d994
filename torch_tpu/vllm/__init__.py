"""vLLM platform plugin for the ``tpu`` device.

vLLM calls :func:`register` (entry point group ``vllm.platform_plugins``, name ``torch_tpu``)
in every process it starts. The plugin answers with the platform class only when vLLM is
importable and the ``tpu`` device is available, so installing torch_tpu never changes which
platform vLLM picks elsewhere. ``TORCH_TPU_VLLM=0`` switches it off (e.g. to run vLLM's own
CPU engine in the same environment).
"""

import os

PLATFORM_QUALNAME = "torch_tpu.vllm.platform.TpuTorchPlatform"


def register():
    """vLLM's platform-plugin hook: the qualified name of our Platform class, or None."""
    if os.environ.get("TORCH_TPU_VLLM", "1") == "0":
        return None
    try:
        import vllm  # noqa: F401
    except ImportError:
        return None
    import torch
    import torch_tpu  # noqa: F401  (registers the device)

    if not torch.tpu.is_available():
        return None
    return PLATFORM_QUALNAME
