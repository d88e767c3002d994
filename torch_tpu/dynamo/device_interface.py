"""Dynamo's view of the ``tpu`` device (streams, events, synchronisation, properties)."""

import torch
from torch._dynamo import device_interface as _registry
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

from .. import tpu


class TpuInterface(DeviceInterface):
    device = tpu.device
    Event = tpu.Event
    Stream = tpu.Stream

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            tpu.set_device(device)

        @staticmethod
        def current_device() -> int:
            return tpu.current_device()

        @staticmethod
        def get_device_properties(device=None):
            return tpu.get_device_properties(device)

    current_device = staticmethod(tpu.current_device)
    set_device = staticmethod(tpu.set_device)
    device_count = staticmethod(tpu.device_count)
    is_available = staticmethod(tpu.is_available)
    synchronize = staticmethod(tpu.synchronize)
    current_stream = staticmethod(tpu.current_stream)
    stream = staticmethod(tpu.stream)
    get_device_properties = staticmethod(tpu.get_device_properties)
    memory_allocated = staticmethod(tpu.memory_allocated)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return TpuInterface.exchange_device(device)

    @staticmethod
    def exchange_device(device: int) -> int:
        previous = tpu.current_device()
        if device >= 0 and device != previous:
            tpu.set_device(device)
        return previous

    @staticmethod
    def set_stream(stream) -> None:
        pass  # one stream per device: work is ordered by the device's queue

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        pass

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return 0

    @staticmethod
    def get_compute_capability(device=None):
        return tpu.get_device_name(device)

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_dtype_supported(dtype: torch.dtype, including_emulation: bool = False) -> bool:
        return dtype not in (torch.complex64, torch.complex128, torch.complex32) and not str(dtype).startswith(
            "torch.float8"
        )

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return False


def register() -> None:
    # Dynamo fills its registry (with a placeholder "tpu" entry) on first use; fill it first so
    # that this interface is the one that stays.
    if not getattr(_registry, "_device_initialized", True):
        _registry.init_device_reg()
    register_interface_for_device("tpu", TpuInterface)
    for i in range(tpu.device_count()):
        register_interface_for_device(f"tpu:{i}", TpuInterface)
