"""vLLM worker for the ``tpu`` device: device set-up, KV cache sizing, the model runner."""

import os
import time
from contextlib import nullcontext

import torch
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes

from torch_tpu.serving.memory import kv_cache_budget

from .execution import selected_mode

logger = init_logger(f"vllm.{__name__}")  # under "vllm": vLLM configures only its own loggers


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
        if selected_mode() == "program":
            from .model_runner import TpuTorchModelRunner

            return TpuTorchModelRunner(self.vllm_config, self.device)
        from .legacy_runner import TpuTorchLegacyRunner

        return TpuTorchLegacyRunner(self.vllm_config, self.device)

    def load_model(self, *, load_dummy_weights: bool = False) -> None:
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(self.vllm_config):
            self.model_runner.load_model(load_dummy_weights=load_dummy_weights)

    def determine_available_memory(self) -> int:
        """Bytes for the KV cache (torch_tpu/serving/memory.py): an explicit
        kv_cache_memory_bytes; on the CPU plugin VLLM_CPU_KVCACHE_SPACE or 4 GiB, capped by the
        memory available; on accelerators gpu_memory_utilization of the device memory minus
        what is in use. A budget that cannot fit is a clear error before any allocation."""
        budget, source = kv_cache_budget(
            self.device, self.cache_config.gpu_memory_utilization, self.cache_config.kv_cache_memory_bytes
        )
        logger.info("KV cache budget on %s: %.2f GiB (%s)", self.device, budget / (1 << 30), source)
        return budget

    def compile_or_warm_up_model(self) -> CompilationTimes:
        # The step runner captures its decode programs now (TORCH_TPU_VLLM_WARMUP=0: on first use);
        # every other bucket compiles on first use and stays in the cache.
        warm_up = getattr(self.model_runner, "warm_up", None)
        if warm_up is not None and os.environ.get("TORCH_TPU_VLLM_WARMUP", "1") != "0":
            start = time.perf_counter()
            count = warm_up()
            logger.info("tpu warm-up: %d step programs captured in %.1f s", count, time.perf_counter() - start)
        set_random_seed(self.model_config.seed)
        return CompilationTimes(
            language_model=self.compilation_config.compilation_time,
            encoder=self.compilation_config.encoder_compilation_time,
        )

    def sleep(self, level: int = 1) -> None:
        logger.warning("sleep mode is not supported on tpu; ignored")

    def wake_up(self, tags=None) -> None:
        logger.warning("sleep mode is not supported on tpu; ignored")
