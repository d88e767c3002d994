"""SGLang's out-of-tree platform for the ``tpu`` device (torch_tpu's PrivateUse1 backend)."""

import torch
import torch_tpu  # noqa: F401  (registers the device and torch.tpu)
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import SRTPlatform

from . import BACKEND_NAME


class TpuSRTPlatform(SRTPlatform):
    # OOT: SGLang's out-of-tree code paths (KV pool / allocator / graph factories below).
    _enum = PlatformEnum.OOT
    device_name = "tpu"
    device_type = "tpu"

    # ---- device facts, through torch.tpu (shaped like torch.cuda)
    def get_device(self, device_id=None) -> str:
        return "tpu" if device_id is None else f"tpu:{device_id}"

    def get_device_name(self, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return int(torch.tpu.get_device_properties(device_id).total_memory)

    def get_current_memory_usage(self, device=None) -> float:
        free, total = torch.tpu.mem_get_info(device)
        return float(total - free)

    def set_device(self, device) -> None:
        torch.tpu.set_device(device)

    def empty_cache(self) -> None:
        torch.tpu.empty_cache()

    def synchronize(self) -> None:
        torch.tpu.synchronize()

    def is_pin_memory_available(self, device=None) -> bool:
        return False

    def get_torch_distributed_backend_str(self) -> str:
        return "gloo"

    def get_compile_backend(self, mode=None) -> str:
        return "tpu"

    # ---- configuration
    def apply_server_args_defaults(self, server_args) -> None:
        """tpu's defaults, where the user gave none: the device, our attention backend, the
        PyTorch sampler name (the step program samples on the device itself), no CUDA graphs, at
        most 256 running requests, sleeping when idle, and the plain scheduler loop (each step's
        one program and one read are its own synchronisation; SGLang's overlap loop relays tokens
        through CUDA-style streams and events)."""
        if server_args.device is None:
            server_args.device = "tpu"
        if server_args.attention_backend is None:
            server_args.attention_backend = BACKEND_NAME
        if server_args.sampling_backend is None:
            server_args.sampling_backend = "pytorch"
        if server_args.cuda_graph_backend_decode is None:
            server_args.cuda_graph_backend_decode = "disabled"
        if server_args.cuda_graph_backend_prefill is None:
            server_args.cuda_graph_backend_prefill = "disabled"
        # Wait for requests instead of polling: on the CPU plugin the host's cores are the device's.
        server_args.sleep_on_idle = True
        if server_args.max_running_requests is None:
            # vLLM's default: bounds the per-slot device state and the decode buckets.
            server_args.max_running_requests = 256
        server_args.disable_overlap_schedule = True

    def get_default_attention_backend(self) -> str:
        return BACKEND_NAME

    def init_backend(self) -> None:
        pass  # `import torch_tpu` above registered the device in this process

    # ---- factories
    def get_mha_kv_pool_cls(self):
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

        return MHATokenToKVPool

    def get_paged_allocator_cls(self):
        from .allocator import HostPagedAllocator

        return HostPagedAllocator

    def get_graph_runner_cls(self):
        raise NotImplementedError(
            "SGLang on tpu runs every step as one compiled program of its own (torch_tpu.sglang.step_runner); "
            "keep --cuda-graph-backend-decode disabled (the tpu default)"
        )
