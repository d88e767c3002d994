"""vLLM's GPU model runner on the ``tpu`` device.

vLLM's GPU runner keeps its inputs in paired host/device buffers and its model, KV cache and
sampler on ``self.device``, which is all we need. What differs: it creates CUDA streams and
events for asynchronous output copies (not used here - async scheduling is off and device
programs complete in order), it loads through a CUDA memory profiler, and it syncs through
CUDA events.

How the model forward runs is chosen by ``TORCH_TPU_VLLM_MODE`` (see ``execution.py``): by
default each step's forward is recorded in Fused Eager and runs as one compiled program. The
step's token count is padded to a power of two (as vLLM pads to CUDA-graph sizes) so those
programs are reused by a steady stream of requests.
"""

import dataclasses
from contextlib import contextmanager

import torch
from vllm.logger import init_logger
from vllm.model_executor.model_loader import get_model
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from .execution import forward_runner

logger = init_logger(__name__)


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


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


class TpuTorchModelRunner(GPUModelRunner):
    def __init__(self, vllm_config, device: torch.device):
        if device.type != "tpu":
            raise ValueError(f"TpuTorchModelRunner runs on a tpu device, got {device}")
        with _cuda_streams_as_tpu():
            super().__init__(vllm_config, device)
        self.use_cuda_graph = False
        self._run_forward = forward_runner()
        logger.info("vLLM model forward on tpu runs in mode %r", self._run_forward.name)

    def _determine_batch_execution_and_padding(self, num_tokens, *args, **kwargs):
        mode, batch, *rest = super()._determine_batch_execution_and_padding(num_tokens, *args, **kwargs)
        # Power-of-two token counts (within the runner's buffers): one program per bucket.
        padded = min(max(_pow2(batch.num_tokens), batch.num_tokens), self.max_num_tokens)
        if padded != batch.num_tokens:
            batch = dataclasses.replace(batch, num_tokens=padded)
        return (mode, batch, *rest)

    def sample_tokens(self, grammar_output):
        with self._run_forward.sampling():
            return super().sample_tokens(grammar_output)

    def _model_forward(self, input_ids=None, positions=None, intermediate_tensors=None,
                       inputs_embeds=None, **model_kwargs):
        return self._run_forward(
            self.model,
            input_ids=input_ids,
            positions=positions,
            intermediate_tensors=intermediate_tensors,
            inputs_embeds=inputs_embeds,
            **model_kwargs,
        )

    def load_model(self, load_dummy_weights: bool = False, *, model=None) -> None:
        if load_dummy_weights:
            raise ValueError("dummy weights (elastic EP scale-up) are not supported on tpu")
        logger.info("Loading model %s onto %s", self.model_config.model, self.device)
        self.model = model if model is not None else get_model(vllm_config=self.vllm_config)
        if self.lora_config:
            self.model = self.load_lora_model(self.model, self.vllm_config, self.device)

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
