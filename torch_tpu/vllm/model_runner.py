"""vLLM's model runner on ``tpu``: each step is one device program (the default runner).

Per step (``execute_model`` + ``sample_tokens``):
  1. host: apply the scheduler's changes to the request table (``requests.py``) and pack the
     step's integer metadata into one buffer (``torch_tpu.serving.step_batch``; NumPy, no device work);
  2. one upload of that buffer;
  3. one program for the step's bucket: input preparation, model forward, logits, sampler and
     slot-state updates (``step_forward.py``), captured on the bucket's first step and replayed
     from C++ afterwards (``torch_tpu.captured``);
  4. one read of the sampled tokens (and log-probs), deferred: with asynchronous scheduling
     (on by default) the step returns at once and vLLM schedules the next step while this one
     runs; the next step takes a running request's last token from the device.

What the program does not implement is refused per request with a clear error (bad words,
prompt log-probs, ...) or per engine at start-up (speculative decoding, LoRA, pipeline
parallelism, pooling and multimodal models); ``TORCH_TPU_VLLM_MODE=fused`` runs vLLM's own
runner op by op for those.
"""

import time
import weakref

import torch
from vllm.logger import init_logger
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, AsyncModelRunnerOutput, LogprobsLists, ModelRunnerOutput

from torch_tpu.serving import paged_attention
from torch_tpu.serving.step_batch import Limits
from torch_tpu.serving.step_inputs import unpack_output
from torch_tpu.serving.step_state import StepState

from .attention import TpuTorchAttentionImpl
from .requests import RequestTable
from .runner_base import TpuRunnerBase
from .step_forward import StepForward

logger = init_logger(f"vllm.{__name__}")  # under "vllm": vLLM configures only its own loggers

_RUNNERS = weakref.WeakSet()


def program_stats() -> dict:
    """Captured step programs and timings of this process's step runners (tests, benchmarks):
    ``host_ns`` is the runner's own host time, ``wait_ns`` the time spent waiting for results."""
    total = {"programs": 0, "captures": 0, "replays": 0, "rerecorded_steps": 0, "steps": 0, "covered_steps": 0,
             "background_compiles": 0, "host_ns": 0, "wait_ns": 0}
    for r in list(_RUNNERS):
        if r.state is None:
            continue
        total["programs"] += len(r.state.programs)
        for k in ("captures", "replays", "rerecorded_steps"):
            total[k] += r.state.programs.stats[k]
        total["steps"] += r.state.steps
        total["covered_steps"] += r.state.covered
        total["background_compiles"] += r.state.background_compiles
        total["host_ns"] += r.host_ns
        total["wait_ns"] += r.wait_ns
    return total


def unsupported_features(vllm_config) -> list:
    """Engine features the step program does not implement (empty: it can run this engine)."""
    found = []
    if vllm_config.speculative_config is not None:
        found.append("speculative decoding")
    if vllm_config.lora_config is not None:
        found.append("LoRA")
    if vllm_config.parallel_config.pipeline_parallel_size > 1:
        found.append("pipeline parallelism")
    mc = vllm_config.model_config
    if mc is not None and mc.runner_type == "pooling":
        found.append("pooling models")
    if mc is not None and mc.is_multimodal_model:
        found.append("multimodal models")
    if mc is not None and getattr(mc, "logprobs_mode", "raw_logprobs") != "raw_logprobs":
        found.append(f"logprobs_mode={mc.logprobs_mode!r}")
    return found


class _StepOutput(AsyncModelRunnerOutput):
    """A launched step; ``get_output`` makes its one read."""

    def __init__(self, runner, batch, packed_out):
        self.runner = runner
        self.batch = batch
        self.packed_out = packed_out

    def get_output(self) -> ModelRunnerOutput:
        b = self.batch
        start = time.perf_counter_ns()
        out = self.packed_out.cpu().numpy()
        self.runner.wait_ns += time.perf_counter_ns() - start
        tokens, logprobs = unpack_output(out, b.rows, b.key.variant)
        return ModelRunnerOutput(
            req_ids=b.req_ids,
            req_id_to_index={r: i for i, r in enumerate(b.req_ids)},
            sampled_token_ids=[[tok] if real else [] for tok, real in zip(tokens.tolist(), b.real)],
            logprobs=LogprobsLists(*logprobs) if logprobs is not None else None,
        )


class TpuTorchModelRunner(TpuRunnerBase):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
        blocked = unsupported_features(vllm_config)
        if blocked:
            raise ValueError(
                f"vLLM on tpu: the one-program step runner does not support {', '.join(blocked)}; "
                "set TORCH_TPU_VLLM_MODE=fused to run vLLM's own model runner op by op instead"
            )
        self.table = RequestTable(self.max_num_reqs)
        self.limits = None
        self.state = None  # StepState, once the KV cache exists
        self.attention_layers = []
        self.kv_cache_tensors = []
        self._pending = None
        self.host_ns = 0  # host time inside execute_model + sample_tokens
        self.wait_ns = 0  # time the host waited for steps' results (the device's share)
        _RUNNERS.add(self)

    def initialize_kv_cache(self, kv_cache_config, *args, **kwargs) -> None:
        super().initialize_kv_cache(kv_cache_config, *args, **kwargs)
        groups = kv_cache_config.kv_cache_groups
        context = self.compilation_config.static_forward_context
        self.attention_layers = [n for n in groups[0].layer_names if n in context]
        self.kv_cache_tensors = [context[n].kv_cache for n in self.attention_layers]
        block_size = groups[0].kv_cache_spec.block_size
        self.limits = Limits(
            block_size=block_size,
            vocab=self.model_config.get_vocab_size(),
            max_rows=self.max_num_reqs,
            max_blocks=-(-self.max_model_len // block_size),
            spare_slot=self.max_num_reqs,
            ragged=paged_attention.reads_in_place(self.max_num_reqs, -(-self.max_model_len // block_size)),
        )
        self.state = StepState("vLLM on tpu", self.limits, self.device, log=logger)

    def initialize_kv_cache_tensors(self, kv_cache_config, kernel_block_sizes, kv_cache_allocation_context=None):
        """One storage per layer, instead of vLLM's single int8 allocation with the layers
        interleaved per block. A step program updates a cache in place only when its output can
        take over the input's buffer, which needs the cache to be a whole storage of its own
        type; a strided slice of a shared byte buffer would make XLA rewrite the whole
        allocation every step. Layout: vLLM's logical [blocks, kv heads, block size, 2 * head
        size] over the physical [blocks, block size, kv heads, 2 * head size] (LBNHC)."""
        from vllm.v1.worker.utils import bind_kv_cache

        if len(kv_cache_config.kv_cache_groups) != 1:
            raise ValueError(
                f"vLLM on tpu: {len(kv_cache_config.kv_cache_groups)} KV cache groups (hybrid or "
                "sliding-window-mixed models); the step runner supports one - set TORCH_TPU_VLLM_MODE=fused"
            )
        group = kv_cache_config.kv_cache_groups[0]
        spec = group.kv_cache_spec
        blocks = kv_cache_config.num_blocks
        kv_caches = {}
        for name in group.layer_names:
            physical = torch.empty(blocks, spec.block_size, spec.num_kv_heads, 2 * spec.head_size,
                                   dtype=spec.dtype, device=self.device)
            cache = physical.permute(0, 2, 1, 3)
            # Written once through the view the attention writes, so the storage's contents have
            # the type every step program reads and writes: each program's output then takes
            # over the input buffer (the capture's run included).
            TpuTorchAttentionImpl._slots_view(cache).zero_()
            kv_caches[name] = cache
        bind_kv_cache(kv_caches, self.compilation_config.static_forward_context, self.kv_caches, 1,
                      kv_cache_groups=kv_cache_config.kv_cache_groups)
        return kv_caches

    def reload_weights(self, *args, **kwargs) -> None:
        super().reload_weights(*args, **kwargs)
        if self.state is not None:
            self.state.programs.clear()  # programs hold the weights they captured

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        start = time.perf_counter_ns()
        if intermediate_tensors is not None:
            raise ValueError("pipeline parallelism is not supported by the tpu step runner")
        self.table.update(scheduler_output)
        self._pending = scheduler_output if scheduler_output.total_num_scheduled_tokens else None
        self.host_ns += time.perf_counter_ns() - start
        return None if self._pending is not None else EMPTY_MODEL_RUNNER_OUTPUT

    def sample_tokens(self, grammar_output):
        start = time.perf_counter_ns()
        out, self._pending = self._pending, None
        if out is None:
            return EMPTY_MODEL_RUNNER_OUTPUT
        grammar = None
        if grammar_output is not None:
            grammar = (grammar_output.structured_output_request_ids, grammar_output.grammar_bitmask)
        scheduled = out.num_scheduled_tokens
        batch = self.state.plan([self.table.requests[r] for r in scheduled], list(scheduled.values()), grammar)
        result = _StepOutput(self, batch, self._launch(batch))
        self.state.served()
        self.host_ns += time.perf_counter_ns() - start
        return result if self.use_async_scheduling else result.get_output()

    def _launch(self, batch):
        return self.state.launch(batch, self._make_step, self.kv_cache_tensors)

    def _make_step(self, key, layout):
        return StepForward(self, key, layout)

    def warm_up(self) -> int:
        """Captures the step programs a server meets, up to max_num_seqs rows and
        max_num_batched_tokens tokens (``StepState.warm_up``); returns the count."""
        return self.state.warm_up(self.max_num_reqs, self._make_step, self.kv_cache_tensors, self.max_num_tokens)
