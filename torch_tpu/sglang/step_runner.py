"""SGLang's model step on ``tpu`` as one device program (replaces the worker's ForwardBatch path).

Per step (``TpModelWorker.forward_batch_generation``, hooked in ``hooks.py``):
  1. host: each scheduled request becomes a ``StepRequest`` - the tokens the host knows (prompt
     and outputs), where this step starts, its KV-slot row of SGLang's request table (on the host
     here), its state slot (its request-table row) and sampling spec - and
     ``torch_tpu.serving.step_batch`` packs the step into one int32 buffer;
  2. one upload;
  3. one program per bucket (captured once, replayed from C++, ``torch_tpu.serving``): input
     preparation, SGLang's model forward with the ``tpu`` attention backend reading and writing
     the paged KV buffers, the logits projection, sampling on the device, slot-state updates;
  4. one read of the sampled tokens, returned to the scheduler as host tensors.

Sampling follows the serving sampler (vLLM's order and rules; SGLang's greedy is top-k 1, its
repetition penalty counts output tokens only, as here). Requests the program does not serve
(log-probs, grammars, custom logit processors, multimodal input, hidden states) are refused at
admission with HTTP 400 (``unsupported_request``).
"""

import logging
import os
import random
import time
import weakref

import numpy as np
import torch
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

from torch_tpu.serving import paged_attention, step_inputs, weights
from torch_tpu.serving.sampler import PenaltyState, SamplingSpec
from torch_tpu.serving.step_batch import Limits, StepRequest
from torch_tpu.serving.step_state import StepState

from .attention import TpuAttentionBackend

logger = logging.getLogger("sglang.torch_tpu")
_TOP_K_ALL = 1 << 30
_RUNNERS = weakref.WeakKeyDictionary()


def unsupported_request(obj) -> str | None:
    """What in a request (GenerateReqInput) the step program does not serve, or None."""
    params = obj.sampling_params if isinstance(obj.sampling_params, dict) else {}
    for name in ("json_schema", "regex", "ebnf", "structural_tag"):
        if params.get(name):
            return f"structured output ({name})"
    if getattr(obj, "return_logprob", False):
        return "return_logprob"
    if getattr(obj, "custom_logit_processor", None):
        return "custom_logit_processor"
    for name in ("image_data", "video_data", "audio_data", "input_embeds"):
        if getattr(obj, name, None) is not None:
            return name
    if getattr(obj, "return_hidden_states", False):
        return "return_hidden_states"
    return None


def spec_from(req) -> SamplingSpec:
    p = req.sampling_params
    greedy = p.top_k == 1
    stops = set(p.stop_token_ids or ()) | set(getattr(req, "eos_token_ids", None) or ())
    seed = getattr(p, "sampling_seed", None)
    return SamplingSpec(
        temperature=0.0 if greedy else float(p.temperature),
        top_k=0 if greedy or p.top_k >= _TOP_K_ALL else int(p.top_k),
        top_p=float(p.top_p),
        min_p=float(p.min_p),
        presence_penalty=float(p.presence_penalty),
        frequency_penalty=float(p.frequency_penalty),
        repetition_penalty=float(p.repetition_penalty),
        seed=seed if seed is not None else random.getrandbits(63),
        min_tokens=int(p.min_new_tokens or 0),
        stop_token_ids=tuple(sorted(stops)) if p.min_new_tokens else (),
        logit_bias={int(k): float(v) for k, v in (getattr(p, "logit_bias", None) or {}).items()},
    )


class _Tokens:
    """A request's known tokens (prompt, then outputs) sliced without concatenating them."""

    def __init__(self, prompt, outputs):
        self.prompt, self.outputs = prompt, outputs

    def __len__(self):
        return len(self.prompt) + len(self.outputs)

    def __getitem__(self, s):
        n = len(self.prompt)
        start, stop = s.start or 0, len(self) if s.stop is None else s.stop
        if stop <= n:
            return list(self.prompt[start:stop])
        if start >= n:
            return list(self.outputs[start - n : stop - n])
        return list(self.prompt[start:]) + list(self.outputs[: stop - n])


class _StepBatchView:
    """What SGLang's model code reads from a ForwardBatch inside the step. Positions and the
    attention come from the step itself; the rest of a ForwardBatch describes features the step
    program does not run (context/data parallelism, speculation, LoRA, multimodal input), which
    a model reads as None. Layers may also park values here for later layers."""

    forward_mode = ForwardMode.EXTEND

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        _read_as_none.add(name)
        return None


_read_as_none = set()  # the ForwardBatch fields models read as None (for debugging)


class SGLangStepRunner:
    def __init__(self, worker):
        mr = worker.model_runner
        if not isinstance(mr.attn_backend, TpuAttentionBackend):
            raise ValueError(f"SGLang on tpu needs --attention-backend tpu, not {type(mr.attn_backend).__name__}")
        self.model = mr.model
        self.device = torch.device(mr.device)
        self.backend = mr.attn_backend
        pool = mr.token_to_kv_pool
        self.kv = list(pool.k_buffer) + list(pool.v_buffer)
        for buffer in self.kv:
            buffer.zero_()  # typed contents (see torch_tpu/captured.py)
        self.table = mr.req_to_token_pool.req_to_token.numpy()  # on the host (hooks.py)
        rows = self.table.shape[0]
        self.vocab = mr.model_config.vocab_size
        self.limits = Limits(block_size=1, vocab=self.vocab, max_rows=mr.req_to_token_pool.size,
                             max_blocks=self.table.shape[1], spare_slot=rows,
                             ragged=paged_attention.reads_in_place(mr.req_to_token_pool.size,
                                                                               self.table.shape[1]))
        self.state = StepState("SGLang on tpu", self.limits, self.device, log=logger)
        self.slot_owner = [None] * rows
        self.specs = {}
        moved = _lay_out_weights(self.model)
        self.logits_weight = weights.logits_weight(self.model.lm_head.weight)
        max_rows = mr.req_to_token_pool.size
        if os.environ.get("TORCH_TPU_SGLANG_WARMUP", "1") != "0":
            start = time.perf_counter()
            args = mr.server_args  # an extend step computes at most a chunk (or max_prefill_tokens)
            chunk = args.chunked_prefill_size if (args.chunked_prefill_size or 0) > 0 else args.max_prefill_tokens
            count = self.state.warm_up(max_rows, self._make_step, self.kv, chunk)
            logger.info("tpu warm-up: %d step programs (up to %d rows, %d tokens) captured in %.1f s", count,
                        max_rows, chunk, time.perf_counter() - start)
        logger.info("tpu step runner ready: %d linear weights laid out for the plugin (packed or input-major)", moved)

    def _requests(self, batch):
        seq = batch.seq_lens_cpu.tolist()
        slots = batch.req_pool_indices.tolist()
        decode = batch.forward_mode.is_decode()
        counts = [1] * len(seq) if decode else list(batch.extend_lens)
        starts = [s - 1 for s in seq] if decode else list(batch.prefix_lens)
        out = []
        for req, s, slot, start in zip(batch.reqs, seq, slots, starts):
            fresh = self.slot_owner[slot] != req.rid
            if fresh:
                self.slot_owner[slot] = req.rid
            spec = self.specs.get(req.rid)
            if spec is None or fresh:
                spec = self.specs[req.rid] = spec_from(req)
            out.append(StepRequest(req_id=req.rid, tokens=_Tokens(req.origin_input_ids, req.output_ids),
                                   num_prompt=len(req.origin_input_ids), spec=spec, blocks=self.table[slot, :s],
                                   num_computed=start, outputs=len(req.output_ids), slot=slot, fresh=fresh,
                                   penalize_prompt=False))
        return out, counts

    def run(self, batch) -> GenerationBatchResult:
        mode = batch.forward_mode
        if not (mode.is_decode() or mode.is_extend() or mode.is_mixed()):
            raise NotImplementedError(f"SGLang on tpu: forward mode {mode.name} is not supported")
        reqs, counts = self._requests(batch)
        plan = self.state.plan(reqs, counts)
        out = self.state.launch(plan, self._make_step, self.kv).cpu().numpy()
        tokens, _ = step_inputs.unpack_output(out, plan.rows, plan.key.variant)
        by_rid = dict(zip(plan.req_ids, tokens.tolist()))
        self.state.served()
        next_ids = torch.tensor([by_rid[r.rid] for r in batch.reqs], dtype=torch.int64)
        return GenerationBatchResult(logits_output=LogitsProcessorOutput(next_token_logits=None),
                                     next_token_ids=next_ids, can_run_cuda_graph=False)

    def _make_step(self, key, layout):
        return _StepForward(self, key, layout)


class _StepForward:
    """Callable(packed, last_tokens, *penalty_state, *k_buffers, *v_buffers) for one bucket."""

    def __init__(self, runner, key, layout):
        self.runner, self.key, self.layout = runner, key, layout

    def __call__(self, packed, last_tokens, *tensors):
        r, key = self.runner, self.key
        v = self.layout.device_views(packed)
        penalty = PenaltyState(*tensors[:2]) if key.variant.penalties else None
        inputs = step_inputs.derive(v, key, 1, last_tokens)
        r.backend.step = inputs
        try:
            with forward_context(ForwardContext(attn_backend=r.backend)):
                hidden = r.model.model(inputs.input_ids.long(), inputs.positions, _StepBatchView())
        finally:
            r.backend.step = None
        logits = _logits(r.model, r.logits_weight, hidden[inputs.logits_rows], r.vocab)
        return step_inputs.finish(logits, v, key, inputs, last_tokens, penalty)


def _logits(model, weight, hidden, vocab):
    """SGLang's logits projection (``LogitsProcessor``) for the rows that sample, with ``weight``
    the runner's ``lm_head`` weight (``weights.logits_weight``)."""
    processor = model.logits_processor
    logits = weights.project(hidden, weight)
    scale = getattr(processor, "logit_scale", None)
    if scale is not None:
        logits = logits * scale
    cap = getattr(processor, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits[:, :vocab]


def _lay_out_weights(model) -> int:
    from sglang.srt.layers.linear import LinearBase
    from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod
    from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    return weights.lay_out_linear_weights(model, LinearBase, UnquantizedLinearMethod, ParallelLMHead,
                                          VocabParallelEmbedding)


def runner_for(worker) -> SGLangStepRunner:
    runner = _RUNNERS.get(worker)
    if runner is None:
        runner = _RUNNERS[worker] = SGLangStepRunner(worker)
    return runner
