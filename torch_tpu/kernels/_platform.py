"""Which custom calls a kernel's module needs, and whether this device's plugin can run them.

Pallas lowers to a custom call per backend: Mosaic (``tpu_custom_call``) on TPU, Triton
(``__gpu$xla.gpu.triton``) on NVIDIA GPUs; with ``interpret=True`` it lowers to plain StableHLO
that every plugin runs (how kernels run on the XLA CPU plugin)."""

from . import _mlir_text

_NEEDS = {
    "tpu_custom_call": ("tpu", "a Pallas TPU (Mosaic) kernel; only a TPU plugin (libtpu) runs it"),
    "__gpu$xla.gpu.triton": ("cuda", "a Pallas GPU (Triton) kernel; only a CUDA plugin runs it"),
    "triton_kernel_call": ("cuda", "a Triton kernel; only a CUDA plugin runs it"),
    "mosaic_gpu": ("cuda", "a Pallas Mosaic GPU kernel; only a CUDA plugin runs it"),
}


class KernelPlatformError(RuntimeError):
    """The kernel needs a custom call this device's PJRT plugin cannot run."""


def device_platform():
    """The JAX platform name of the tpu device's plugin: 'cpu', 'cuda' or 'tpu'."""
    from .. import _C
    name = str(_C._device_info(0)["platform"]).lower()
    if name in ("gpu", "cuda"):
        return "cuda"
    return name


def check_custom_calls(label, text, platform):
    for target in _mlir_text.custom_call_targets(text):
        need = _NEEDS.get(target)
        if need is not None and need[0] != platform:
            raise KernelPlatformError(
                f"{label}: the kernel calls the custom call '{target}' ({need[1]}), but the tpu "
                f"device runs on the '{platform}' plugin. Write the Pallas kernel with "
                "pallas_call(..., interpret=True) to lower it to plain StableHLO, or run on a "
                f"'{need[0]}' plugin (TORCH_TPU_PLATFORM).")
