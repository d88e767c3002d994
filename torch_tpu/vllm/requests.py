"""The step runner's host view of vLLM's requests: tokens, blocks, sampling, state slots.

vLLM's scheduler sends each step's changes (``SchedulerOutput``): new requests with their
prompts and KV blocks, running requests' new blocks and computed-token counts, resumed and
finished requests. ``RequestTable.update`` applies them to plain Python and NumPy state; nothing
here touches the device. Each running request owns a *slot*: its row in the device state the
step program keeps between steps (the last sampled token, penalty counts). A slot is released
when the request finishes or is preempted (a resumed request recomputes its tokens and gets a
fresh slot), so at most ``max_num_seqs`` slots are ever live.

Token ids the host does not know yet (with asynchronous scheduling, the token sampled by the
step still running) are taken on the device from the slot's last sampled token.
"""

from torch_tpu.serving.sampler import SamplingSpec
from torch_tpu.serving.step_batch import StepRequest


class UnsupportedRequest(ValueError):
    """A request feature the one-program step runner does not implement."""


def check_sampling_params(params) -> None:
    """Raises UnsupportedRequest for what the step program lacks (the platform's
    validate_request turns it into vLLM's client error: HTTP 400)."""
    fix = " (or run vLLM's runner path on tpu with TORCH_TPU_VLLM_MODE=fused)"
    if params is None:
        raise UnsupportedRequest("pooling requests are not supported by vLLM on tpu" + fix)
    if getattr(params, "bad_words", None):
        raise UnsupportedRequest("bad_words is not supported by vLLM on tpu" + fix)
    if getattr(params, "prompt_logprobs", None) is not None:
        raise UnsupportedRequest("prompt_logprobs is not supported by vLLM on tpu" + fix)
    if getattr(params, "logprob_token_ids", None):
        raise UnsupportedRequest("logprob_token_ids is not supported by vLLM on tpu" + fix)
    if getattr(params, "logprobs", None) is not None and params.logprobs < 0:
        raise UnsupportedRequest("logprobs=-1 (the whole vocabulary) is not supported by vLLM on tpu" + fix)
    if getattr(params, "logits_processors", None):
        raise UnsupportedRequest("per-request logits processors are not supported by vLLM on tpu" + fix)


def spec_from(params) -> SamplingSpec:
    """vLLM SamplingParams -> the serving sampler's SamplingSpec."""
    check_sampling_params(params)
    return SamplingSpec(
        temperature=float(params.temperature),
        top_k=int(params.top_k or 0),
        top_p=float(params.top_p),
        min_p=float(params.min_p),
        presence_penalty=float(params.presence_penalty),
        frequency_penalty=float(params.frequency_penalty),
        repetition_penalty=float(params.repetition_penalty),
        seed=params.seed,
        logprobs=params.logprobs,
        logit_bias={int(k): float(v) for k, v in (params.logit_bias or {}).items()},
        min_tokens=int(params.min_tokens or 0),
        stop_token_ids=tuple(sorted(params.all_stop_token_ids)) if params.min_tokens else (),
        allowed_token_ids=tuple(params.allowed_token_ids) if params.allowed_token_ids is not None else None,
    )


class RequestTable:
    def __init__(self, max_slots: int):
        self.requests = {}
        self.max_slots = max_slots
        self._free = list(range(max_slots - 1, -1, -1))

    def _release(self, req: StepRequest):
        if req.slot >= 0:
            self._free.append(req.slot)
            req.slot = -1

    def update(self, out) -> None:
        for req_id in out.finished_req_ids:
            req = self.requests.pop(req_id, None)
            if req is not None:
                self._release(req)
        for req_id in out.preempted_req_ids or ():
            req = self.requests.get(req_id)
            if req is not None:
                self._release(req)
        for new in out.scheduled_new_reqs:
            check_sampling_params(new.sampling_params)
            if new.prompt_token_ids is None:
                raise UnsupportedRequest("prompt embeddings are not supported by vLLM on tpu")
            old = self.requests.pop(new.req_id, None)
            if old is not None:  # aborted and resubmitted under the same id
                self._release(old)
            self.requests[new.req_id] = StepRequest(
                req_id=new.req_id,
                tokens=list(new.prompt_token_ids),
                num_prompt=len(new.prompt_token_ids),
                spec=spec_from(new.sampling_params),
                blocks=list(new.block_ids[0]),
                num_computed=new.num_computed_tokens,
            )
        cached = out.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            req = self.requests[req_id]
            req.num_computed = cached.num_computed_tokens[i]
            new_blocks = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                self._release(req)
                req.blocks = list(new_blocks[0])
                known = cached.all_token_ids.get(req_id)
                if known is not None:
                    req.tokens = list(known)
                req.outputs = cached.num_output_tokens[i]
            elif new_blocks is not None:
                req.blocks.extend(new_blocks[0])
        for req_id in out.num_scheduled_tokens:
            req = self.requests[req_id]
            if req.slot < 0:
                if not self._free:
                    raise RuntimeError(f"torch_tpu vLLM runner: more than {self.max_slots} running requests")
                req.slot = self._free.pop()
                req.fresh = True
            else:
                req.fresh = False
