"""Device selection and properties of torch.tpu."""

import os

import torch

from .. import _C


def _get_device_index(device=None, optional=True):
    """Index of `device` (int, "tpu:1", torch.device, or None for the current device)."""
    if device is None:
        if not optional:
            raise ValueError("Expected a tpu device, got None")
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"Expected a tpu device, got {device}")
        return current_device() if device.index is None else device.index
    if isinstance(device, int):
        return device
    raise TypeError(f"Expected a tpu device (int, str or torch.device), got {type(device).__name__}")


def init():
    """Loads the PJRT plugin and creates its client now (otherwise done on first use).
    Raises RuntimeError naming the plugin path, the reason and the fix when it cannot."""
    _C._init()


def is_initialized():
    return _C._is_initialized()


def is_available():
    """True when the PJRT plugin loads and reports at least one device."""
    return _C._device_count() > 0


def device_count():
    """Number of tpu devices (0 when the plugin cannot be loaded)."""
    return _C._device_count()


def current_device():
    return _C._get_device()


def _local_rank_device(idx):
    """The device index `idx` stands for in this process. Under a launcher (torchrun sets
    LOCAL_RANK) a process may own a single tpu device - the XLA CPU plugin's default, or an
    accelerator made visible to this process alone - and code written for CUDA calls
    ``set_device(LOCAL_RANK)``: that index then selects the process's device 0."""
    local_rank = os.environ.get("LOCAL_RANK")
    if idx >= 0 and local_rank is not None and idx == int(local_rank) and device_count() == 1:
        return 0
    return idx


def set_device(device):
    """Selects the current tpu device for this thread (``set_device(LOCAL_RANK)`` selects the
    process's only device when it has one)."""
    idx = _local_rank_device(_get_device_index(device))
    if idx >= 0:
        _C._set_device(idx)


class device:
    """Context manager that changes the current tpu device (no-op for None or a negative index)."""

    def __init__(self, device):
        self.idx = _get_device_index(device, optional=True) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *exc):
        if self.prev_idx >= 0:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager selecting the device of ``obj`` (a tensor or storage); a no-op when
    ``obj`` is not on tpu (as ``torch.cuda.device_of``)."""

    def __init__(self, obj):
        on_tpu = getattr(getattr(obj, "device", None), "type", None) == "tpu"
        super().__init__(obj.get_device() if on_tpu else None)


def get_amp_supported_dtype():
    """The dtypes torch.autocast("tpu") may cast to."""
    return [torch.bfloat16, torch.float16]


def synchronize(device=None):
    """Waits for all work on a tpu device. A device-side error of earlier work is raised here,
    naming the op it came from."""
    _C._synchronize(_get_device_index(device))


class _DeviceProperties:
    def __init__(self, info):
        self.name = info["name"]
        self.total_memory = info["total_memory"]
        self.platform = info["platform"]
        self.platform_version = info["platform_version"]
        self.plugin = info["plugin"]
        self.pjrt_api_version = info["pjrt_api_version"]
        self.debug_string = info["debug_string"]
        # Reported by the plugin (PJRT device description), e.g. "NVIDIA H200" or "cpu".
        self.device_kind = info["device_kind"]
        # "pjrt" when total_memory is the plugin's memory limit, "host" for the host's memory.
        self.total_memory_source = info["total_memory_source"]

    def __repr__(self):
        return (
            f"_TpuDeviceProperties(name='{self.name}', total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"platform='{self.platform}', pjrt_api_version='{self.pjrt_api_version}')"
        )


def get_device_properties(device=None):
    return _DeviceProperties(_C._device_info(_get_device_index(device)))


def get_device_name(device=None):
    return get_device_properties(device).name


def is_bf16_supported(including_emulation=True):
    """bfloat16 is supported by every PJRT backend torch_tpu drives."""
    return True
