"""The vLLM ``Platform`` for the ``tpu`` device (torch_tpu's PrivateUse1 backend)."""

import torch
import torch_tpu  # noqa: F401  (registers the device and torch.tpu)
from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

logger = init_logger(f"vllm.{__name__}")  # under "vllm": vLLM configures only its own loggers

WORKER_QUALNAME = "torch_tpu.vllm.worker.TpuTorchWorker"
ATTENTION_QUALNAME = "torch_tpu.vllm.attention.TpuTorchAttentionBackend"
# Paged KV cache block size when the user gives none: small blocks keep the gathered
# key/value windows (and so the programs) small for short sequences.
DEFAULT_BLOCK_SIZE = 16


class TpuTorchPlatform(Platform):
    # OOT: vLLM's CustomOps call forward_oot (= forward_native) and nothing assumes CUDA.
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    # vLLM registers its custom ops (unified attention, ...) for this dispatch key.
    dispatch_key: str = "PrivateUse1"
    # Collectives between workers go through gloo on host copies.
    dist_backend: str = "gloo"
    device_control_env_var: str = "TORCH_TPU_VISIBLE_DEVICES"
    simple_compile_backend: str = "tpu"

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float32, torch.bfloat16, torch.float16]

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype):
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"dtype {dtype} is not supported by vLLM on tpu")

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return int(torch.tpu.get_device_properties(device_id).total_memory)

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        return float(torch.tpu.memory_allocated(device))

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        # Pinned host buffers make the runner's host->device input copies non-blocking.
        return True

    @classmethod
    def import_kernels(cls) -> None:
        # Never load vllm._C: its CPU kernels read raw data pointers of device tensors.
        pass

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        from .kernels import register_native_kernels

        register_native_kernels()

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        if getattr(attn_selector_config, "use_mla", False):
            raise NotImplementedError("MLA attention is not supported on tpu yet.")
        if getattr(attn_selector_config, "use_sparse", False):
            raise NotImplementedError("Sparse attention is not supported on tpu.")
        if selected_backend is not None:
            logger.info("Ignoring attention backend %s on tpu.", selected_backend)
        return ATTENTION_QUALNAME

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "vllm.distributed.device_communicators.base_device_communicator.DeviceCommunicatorBase"

    @classmethod
    def opaque_attention_op(cls) -> bool:
        return True

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return False

    @classmethod
    def supports_structured_output(cls) -> bool:
        return True

    @classmethod
    def validate_request(cls, processed_inputs, params) -> None:
        """Refuses sampling features the step program does not implement: a client error
        (HTTP 400) naming the feature and the runner that has it."""
        from .execution import selected_mode

        if selected_mode() == "program":
            from vllm.exceptions import VLLMValidationError

            from .requests import UnsupportedRequest, check_sampling_params

            try:
                check_sampling_params(params)
            except UnsupportedRequest as e:
                raise VLLMValidationError(str(e)) from None

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode, CUDAGraphMode

        cache_config = vllm_config.cache_config
        if not cache_config.user_specified_block_size:
            cache_config.block_size = DEFAULT_BLOCK_SIZE

        # No CUDA graphs and no vLLM compilation (Inductor): the model runner compiles the
        # step itself (TORCH_TPU_VLLM_MODE, see execution.py), and vLLM's CustomOps (RMSNorm,
        # rotary, SiLU-and-mul) run their native PyTorch forward on the device.
        compilation_config = vllm_config.compilation_config
        compilation_config.mode = CompilationMode.NONE
        compilation_config.cudagraph_mode = CUDAGraphMode.NONE
        compilation_config.cudagraph_capture_sizes = []
        compilation_config.custom_ops = ["none"]
        if vllm_config.model_config is not None:
            vllm_config.model_config.enforce_eager = True

        # The step runner (TORCH_TPU_VLLM_MODE=program) launches a step and returns; with
        # asynchronous scheduling (vLLM's default) the host schedules step N+1 while step N runs
        # and reads N's tokens afterwards. vLLM's own runner on tpu (legacy modes) reads its
        # outputs when the step returns, so it has nothing to overlap.
        from .execution import selected_mode

        if selected_mode() != "program":
            vllm_config.scheduler_config.async_scheduling = False

        parallel_config = vllm_config.parallel_config
        if parallel_config.worker_cls == "auto":
            parallel_config.worker_cls = WORKER_QUALNAME
        parallel_config.disable_custom_all_reduce = True
        if parallel_config.enable_dbo:
            logger.warning("Dual-batch overlap is not supported on tpu; disabled.")
            parallel_config.enable_dbo = False
