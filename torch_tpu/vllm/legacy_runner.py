"""vLLM's own GPU model runner on ``tpu``, op by op (``TORCH_TPU_VLLM_MODE=fused|eager|compile``).

The default runner (``model_runner.py``) runs a whole step as one program; this one keeps vLLM's
input preparation and sampler as they are (many small device programs per step) and runs only the
model forward in the chosen mode (``execution.py``). It serves what the step program does not
implement (speculative decoding, LoRA, pooling, prompt log-probs, bad words). The step's token
count is padded to a power of two (as vLLM pads to CUDA-graph sizes) so the forward programs are
reused by a steady stream of requests.
"""

import dataclasses

from vllm.logger import init_logger

from .execution import forward_runner
from .runner_base import TpuRunnerBase

logger = init_logger(f"vllm.{__name__}")  # under "vllm": vLLM configures only its own loggers


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class TpuTorchLegacyRunner(TpuRunnerBase):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
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
