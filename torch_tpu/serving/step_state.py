"""What a serving engine keeps on the device between steps, and how a step is launched
(engine-neutral: the vLLM and SGLang step runners each own one).

Per state slot (a running request; one spare slot takes padding rows' writes): the last sampled
token - the next step's input where the host does not know it yet - and, from the first batch
that uses penalties, the penalty counts and prompt masks. ``launch`` makes the step's one upload
and runs its bucket's program; ``warm_up`` captures the decode programs an engine will need.
"""

import logging

import torch

from .packing import upload
from .sampler import PenaltyState, SamplingSpec
from .step_batch import StepRequest, build, layout_for
from .step_program import StepPrograms

logger = logging.getLogger("torch_tpu.serving")


class StepState:
    def __init__(self, label: str, limits, device):
        self.label = label
        self.limits = limits
        self.device = device
        self.programs = StepPrograms(label)
        self.last_tokens = torch.zeros(limits.spare_slot + 1, dtype=torch.int32, device=device)
        self.penalty = None

    def launch(self, plan, make_step, kv_tensors):
        """Runs ``plan``'s step: ``make_step(key, layout)`` builds the step function when its bucket
        is new. Returns the step's packed output (a device tensor, not yet read)."""
        key = plan.key
        if key.variant.penalties and self.penalty is None:
            self.penalty = PenaltyState.allocate(self.limits.spare_slot, self.limits.vocab, self.device)
        state = self.penalty.tensors() if key.variant.penalties else []
        inputs = [upload(plan.buffer, self.device), self.last_tokens, *state, *kv_tensors]
        if key not in self.programs.keys():
            logger.info("%s: step program for %s (sampler %s)", self.label, key.describe(), key.variant)
        with torch.inference_mode():
            return self.programs.run(key, make_step(key, layout_for(key, self.limits)), inputs)[0]

    def warm_up(self, max_rows: int, make_step, kv_tensors) -> int:
        """Captures the greedy decode program of every decode-row bucket up to ``max_rows`` at the
        smallest key window, with dummy rows (KV writes to the engine's padding block 0, state to
        the spare slot). Returns how many programs it captured."""
        before, n, spare = len(self.programs), 1, self.limits.spare_slot
        while True:
            reqs = [StepRequest(req_id=f"warmup-{i}", tokens=[0], num_prompt=1, spec=SamplingSpec(), blocks=[0],
                                num_computed=0, slot=spare) for i in range(n)]
            self.launch(build(reqs, [1] * n, self.limits), make_step, kv_tensors).cpu()
            if n >= max_rows:
                return len(self.programs) - before
            n = min(max(16, n * 2), max_rows)  # 1 (the smallest row bucket), 16, 32, ... max_rows
