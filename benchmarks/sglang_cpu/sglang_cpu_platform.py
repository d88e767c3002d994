"""SGLang's CPU path for benchmarks/serving_online.py: an out-of-tree SGLang platform on the host
CPU with SGLang's own ``torch_native`` attention and PyTorch sampler - the contender "SGLang on
the CPU". (SGLang's in-tree CPU engine needs its ``sgl_kernel`` C++ extension built from source,
which PyPI does not ship.) The benchmark puts this directory and a generated entry point on
``PYTHONPATH`` for that server only, with ``TORCH_TPU_SGLANG=0`` so torch_tpu's platform steps
aside. It borrows torch_tpu's Triton-free allocator and torchvision guard, which are
device-neutral."""

from sglang.srt.platforms.cpu import CpuDeviceMixin
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import SRTPlatform


def activate():
    from torch_tpu.sglang import torchvision_guard

    torchvision_guard.install()
    return "sglang_cpu_platform.CpuOOTPlatform"


class CpuOOTPlatform(CpuDeviceMixin, SRTPlatform):
    _enum = PlatformEnum.OOT
    device_name = "cpu"
    device_type = "cpu"

    def get_device(self, device_id=None):
        return "cpu"

    def get_default_attention_backend(self):
        return "torch_native"

    def apply_server_args_defaults(self, server_args):
        if server_args.device is None:
            server_args.device = "cpu"
        if server_args.attention_backend is None:
            server_args.attention_backend = "torch_native"
        if server_args.sampling_backend is None:
            server_args.sampling_backend = "pytorch"
        server_args.sleep_on_idle = True

    def init_backend(self):
        pass

    def is_pin_memory_available(self, device=None):
        return False

    def get_mha_kv_pool_cls(self):
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

        return MHATokenToKVPool

    def get_paged_allocator_cls(self):
        from torch_tpu.sglang.allocator import HostPagedAllocator

        return HostPagedAllocator
