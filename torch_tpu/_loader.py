"""The device-backend autoload target: ``import torch`` calls ``load()`` through the
``torch.backends`` entry point, so the ``tpu`` device exists before any library looks for it
(Transformers and Diffusers detect devices when they are imported). Ray's TPU device manager
calls ``torch_tpu._loader.load()`` by name too.

Importing this module imports ``torch_tpu``, which registers everything once; ``load()`` is
therefore idempotent. ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (PyTorch's switch) skips the autoload;
``import torch_tpu`` still works then.
"""


def load():
    """Register the ``tpu`` device, ``torch.tpu``, ``torch.backends.tpu`` and ``tpu_dist``."""
    import torch_tpu  # noqa: F401  (registration happens at its first import)
