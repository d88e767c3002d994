"""What every vLLM model runner on ``tpu`` shares: vLLM's GPU model runner with the device set
to ``tpu``, its CUDA streams and events replaced, and model loading without CUDA's memory
profiler. ``model_runner.py`` (the default, one program per step) and ``legacy_runner.py`` (the
op-by-op paths of ``TORCH_TPU_VLLM_MODE``) build on it."""

from contextlib import contextmanager

import torch
from vllm.logger import init_logger
from vllm.model_executor.model_loader import get_model
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from torch_tpu.serving import weights

logger = init_logger(f"vllm.{__name__}")  # under "vllm": vLLM configures only its own loggers


class _NoStream:
    """Stands in for torch.cuda.Stream: the runner's side streams are only used for
    asynchronous output copies, which run in order on the tpu queue anyway."""

    def __init__(self, *args, **kwargs):
        self.device = torch.device("tpu", torch.tpu.current_device())

    def wait_stream(self, *args, **kwargs):
        pass

    def synchronize(self):
        torch.tpu.synchronize()


class _SyncEvent:
    """Stands in for torch.cuda.Event / torch.Event: record is free, synchronize waits
    for the device."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, *args, **kwargs):
        pass

    def wait(self, *args, **kwargs):
        pass

    def query(self):
        return True

    def synchronize(self):
        torch.tpu.synchronize()


@contextmanager
def _cuda_streams_as_tpu():
    saved = (torch.Event, torch.cuda.Stream, torch.cuda.Event)
    torch.Event, torch.cuda.Stream, torch.cuda.Event = _SyncEvent, _NoStream, _SyncEvent
    try:
        yield
    finally:
        torch.Event, torch.cuda.Stream, torch.cuda.Event = saved


def lay_out_linear_weights(model) -> int:
    """vLLM's layers for ``torch_tpu.serving.weights.lay_out_linear_weights``."""
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    return weights.lay_out_linear_weights(model, LinearBase, UnquantizedLinearMethod, ParallelLMHead,
                                          VocabParallelEmbedding)


class TpuRunnerBase(GPUModelRunner):
    def __init__(self, vllm_config, device: torch.device):
        if device.type != "tpu":
            raise ValueError(f"{type(self).__name__} runs on a tpu device, got {device}")
        with _cuda_streams_as_tpu():
            super().__init__(vllm_config, device)
        self.use_cuda_graph = False

    def load_model(self, load_dummy_weights: bool = False, *, model=None) -> None:
        if load_dummy_weights:
            raise ValueError("dummy weights (elastic EP scale-up) are not supported on tpu")
        logger.info("Loading model %s onto %s", self.model_config.model, self.device)
        self.model = model if model is not None else get_model(vllm_config=self.vllm_config)
        if self.lora_config:
            self.model = self.load_lora_model(self.model, self.vllm_config, self.device)
        moved = lay_out_linear_weights(self.model)
        logger.info("tpu: %d linear weights laid out for the plugin (packed for its matmul kernel, or input-major)", moved)

    def get_model(self):
        return self.model

    def _sync_device(self) -> None:
        torch.tpu.synchronize(self.device)

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        return sampled_token_ids.cpu().tolist()

    def _zero_block_ids(self, block_ids: list[int]) -> None:
        # Fresh blocks are fully overwritten before they are read (attention masks by
        # position), so nothing needs zeroing.
        pass
