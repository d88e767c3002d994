"""vLLM worker for the ``tpu`` device: device set-up, KV cache sizing, the model runner."""

from contextlib import nullcontext

import torch
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes

from .model_runner import TpuTorchModelRunner

logger = init_logger(__name__)


class TpuTorchWorker(Worker):
    def init_device(self):
        if not torch.tpu.is_available():
            raise RuntimeError("torch_tpu: no tpu device is available for the vLLM worker")
        index = self.local_rank % torch.tpu.device_count()
        self.device = torch.device("tpu", index)
        torch.tpu.set_device(self.device)
        current_platform.check_if_supports_dtype(self.model_config.dtype)
        init_worker_distributed_environment(
            self.vllm_config,
            self.rank,
            self.distributed_init_method,
            self.local_rank,
            current_platform.dist_backend,
        )
        set_random_seed(self.model_config.seed)
        self._init_workspace_and_model_runner()

    def _maybe_get_memory_pool_context(self, tag: str):
        # No sleep-mode (CuMem) allocator on tpu: tensors use torch_tpu's allocator.
        return nullcontext()

    def _make_model_runner(self):
        return TpuTorchModelRunner(self.vllm_config, self.device)

    def load_model(self, *, load_dummy_weights: bool = False) -> None:
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(self.vllm_config):
            self.model_runner.load_model(load_dummy_weights=load_dummy_weights)

    def determine_available_memory(self) -> int:
        """Bytes for the KV cache: the explicit --kv-cache-memory-bytes, else the
        configured fraction of the device's free memory."""
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit is not None:
            return int(explicit)
        free, total = torch.tpu.mem_get_info(self.device)
        budget = int(total * self.cache_config.gpu_memory_utilization) - (total - free)
        if budget <= 0:
            raise ValueError(
                f"no tpu memory left for the KV cache ({free} of {total} bytes free, "
                f"gpu_memory_utilization={self.cache_config.gpu_memory_utilization}); "
                "raise gpu_memory_utilization or set kv_cache_memory_bytes"
            )
        logger.info("KV cache budget on %s: %d bytes", self.device, budget)
        return budget

    def compile_or_warm_up_model(self) -> CompilationTimes:
        # Programs (per bucket) compile on first use and stay in the cache.
        set_random_seed(self.model_config.seed)
        return CompilationTimes(
            language_model=self.compilation_config.compilation_time,
            encoder=self.compilation_config.encoder_compilation_time,
        )

    def sleep(self, level: int = 1) -> None:
        logger.warning("sleep mode is not supported on tpu; ignored")

    def wake_up(self, tags=None) -> None:
        logger.warning("sleep mode is not supported on tpu; ignored")
