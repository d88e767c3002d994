"""What a serving engine keeps on the device between steps, and how a step is launched
(engine-neutral: the vLLM and SGLang step runners each own one).

Per state slot (a running request; one spare slot takes padding rows' writes): the last sampled
token - the next step's input where the host does not know it yet - and, from the first batch
that uses penalties, the penalty counts and prompt masks.

``plan`` lays a step out. A step whose bucket has no program yet runs in a compiled bucket that
covers it, when that costs at most ``cover_ratio`` times its own (twice that for steps with
prefills: each such shape is met once or twice as requests arrive, where a capture would stall
the server for far longer than one padded step); shapes that come and go (prefills arriving
beside decodes, the tail of a burst) would otherwise each cost a compile. A bucket met
``promote_after`` times (steady decoding of a smaller batch, a steady arrival pattern) gets its
own program, and so does one whose cover costs more than ``cover_ratio`` but at most
``interim_ratio`` times that: its program is recorded right after the step is launched and
compiled on a worker thread (``CapturedPrograms.compile_in_background``) while the cover keeps
serving the shape, so the server never waits for a compile when some compiled bucket can run
the step. Decode steps past half their key window also compile the next window ahead (their
sequences grow into it, and nothing smaller covers it). Only a step that no compiled bucket covers within
``interim_ratio`` is captured on the spot (waiting for its background compile if one is under
way). ``launch`` makes the step's one upload and runs its
bucket's program; ``warm_up`` captures the decode programs an engine will need. ``served``
counts a served step and, with ``TORCH_TPU_SERVING_STATS=path``, writes the counters tests and
benchmarks read from a server process to that file.
"""

import dataclasses
import json
import logging
import os

import torch

from .buckets import bucket
from .packing import upload
from .sampler import PenaltyState, SamplingSpec
from .step_batch import StepRequest, build, layout_for
from . import weights
from ..captured import CapturedPrograms

logger = logging.getLogger("torch_tpu.serving")


class StepState:
    def __init__(self, label: str, limits, device, cover_ratio: float = 2.0, promote_after: int = 64,
                 interim_ratio: float = 4.0, log=None):
        self.label = label
        self.log = log or logger  # engines pass a logger their own logging configuration shows
        self.limits = limits
        self.device = device
        self.programs = CapturedPrograms(label)
        self.last_tokens = torch.zeros(limits.spare_slot + 1, dtype=torch.int32, device=device)
        self.penalty = None
        self.cover_ratio = cover_ratio  # 0: every step in its own bucket
        self.steps = 0  # served steps (warm-up not counted)
        self.promote_after = promote_after
        self.interim_ratio = interim_ratio
        self.covered = 0  # steps run in a larger compiled bucket
        self.background_compiles = 0  # buckets whose programs were compiled off the serving path
        self._covered_by_key = {}
        self._compile_next = None  # a bucket to compile in the background after this step's launch
        self.stats_path = os.environ.get("TORCH_TPU_SERVING_STATS")

    def plan(self, reqs, counts, grammar=None):
        """``step_batch.build`` with this engine's choice of bucket."""
        return build(reqs, counts, self.limits, grammar, choose=self._choose)

    def _choose(self, key, prefill_tokens, decode_blocks=0):
        chosen = self._cover(key, prefill_tokens)
        if chosen == key and not key.has_prefill and not key.ragged and 2 * decode_blocks > key.decode_blocks:
            self._look_ahead(key)
        return chosen

    def _cover(self, key, prefill_tokens):
        if not self.cover_ratio or key in self.programs:
            return key
        background = self.programs.background_state(key)
        if background is not None and background != "pending":
            return key  # compiled off the serving path (or it could not be: captured now, as usual)
        bs = self.limits.block_size
        best = min((k for k in self.programs.keys() if k.covers(key, prefill_tokens)),
                   key=lambda k: k.cost(bs), default=None)
        ratio = self.cover_ratio * (2 if key.has_prefill else 1)
        if best is None or best.cost(bs) > self.interim_ratio * ratio * key.cost(bs):
            return key
        times = self._covered_by_key.get(key, 0) + 1
        if background is None and (times >= self.promote_after or best.cost(bs) > ratio * key.cost(bs)):
            self._compile_next = key
        self._covered_by_key[key] = times
        self.covered += 1
        return best

    def _look_ahead(self, key):
        """Decoding sequences past half their key window grow into the next one, which no
        compiled bucket covers: its program is compiled in the background while they decode in
        this one. A window of the whole table has no next one."""
        if not self.cover_ratio or self._compile_next is not None or key.decode_blocks >= self.limits.table_width():
            return
        longer = dataclasses.replace(key, decode_blocks=self.limits.key_blocks(key.decode_blocks + 1))
        if longer not in self.programs and self.programs.background_state(longer) is None:
            self._compile_next = longer

    def launch(self, plan, make_step, kv_tensors):
        """Runs ``plan``'s step: ``make_step(key, layout)`` builds the step function when its bucket
        is new. Returns the step's packed output (a device tensor, not yet read)."""
        key = plan.key
        if key.variant.penalties and self.penalty is None:
            self.penalty = PenaltyState.allocate(self.limits.spare_slot, self.limits.vocab, self.device)
        state = self.penalty.tensors() if key.variant.penalties else []
        inputs = [upload(plan.buffer, self.device), self.last_tokens, *state, *kv_tensors]
        if key not in self.programs:
            self.log.info("%s: step program for %s (sampler %s)", self.label, key.describe(), key.variant)
        with torch.inference_mode():
            out = self.programs.run(key, make_step(key, layout_for(key, self.limits)), inputs)[0]
            if self._compile_next is not None:
                self._compile_in_background(self._compile_next, make_step, kv_tensors, state)
        return out

    def _compile_in_background(self, key, make_step, kv_tensors, state):
        """Records ``key``'s step program (nothing runs: dummy metadata, rows on the spare slot)
        and compiles it on a worker thread, while the device runs the step just launched."""
        self._compile_next = None
        layout = layout_for(key, self.limits)
        buffer, views = layout.host_buffer()
        views["rows"][:, 3] = self.limits.spare_slot
        inputs = [upload(buffer, self.device), self.last_tokens, *state, *kv_tensors]
        self.log.info("%s: compiling the step program for %s in the background", self.label, key.describe())
        self.programs.compile_in_background(key, make_step(key, layout), inputs)
        self.background_compiles += 1

    def warm_up(self, max_rows: int, make_step, kv_tensors, max_tokens: int = 0) -> int:
        """Captures, for the two samplers requests use unless they ask for more (greedy, and
        temperature alone: the OpenAI APIs' default, temperature 1), the decode program of every
        row bucket up to ``max_rows`` (at the smallest key window in the split layout). In the
        ragged layout a decode bucket (T = R) also serves every step mixing prompts and decodes
        of at most T tokens and R rows, so adding buckets of 2, 8, 32... times ``max_rows``
        tokens up to ``max_tokens`` (the engine's tokens per step) covers every step a server can
        meet: it never compiles after warm-up. Dummy rows: KV writes to the engine's padding
        block 0, state to the spare slot. Returns how many programs it captured."""
        before, spare = len(self.programs), self.limits.spare_slot
        longest = self.limits.table_width() * self.limits.block_size  # no row is longer than its table
        for spec in (SamplingSpec(), SamplingSpec(temperature=1.0, seed=0)):
            for tokens, rows in self._warm_up_shapes(max_rows, max_tokens):
                counts = [min(tokens // rows, longest)] * rows
                reqs = [StepRequest(req_id=f"warmup-{i}", tokens=[0] * n, num_prompt=n, spec=spec, blocks=[0],
                                    num_computed=0, slot=spare) for i, n in enumerate(counts)]
                self.launch(build(reqs, counts, self.limits), make_step, kv_tensors).cpu()
        return len(self.programs) - before

    def _warm_up_shapes(self, max_rows, max_tokens):
        """(tokens, rows) of the warm-up steps: rows 1 (the smallest row bucket), 16, 32, ...
        max_rows, one token each; ragged, then max_rows rows over 2, 8, 32... times as many
        tokens, the last at least ``max_tokens``."""
        shapes, n = [], 1
        while True:
            shapes.append((n, n))
            if n >= max_rows:
                break
            n = min(max(16, n * 2), max_rows)  # 1, 16, 32, ... max_rows
        if self.limits.ragged:
            tokens = 2 * max_rows
            while shapes[-1][0] < max_tokens:
                shapes.append((min(tokens, bucket(max_tokens)), max_rows))
                tokens *= 4
        return shapes

    def served(self) -> None:
        """Counts a step an engine served (after its launch)."""
        self.steps += 1
        if self.stats_path:
            self._write_stats()

    def _write_stats(self):
        import torch_tpu

        cache = torch.tpu.compilation_cache_stats()
        stats = {"steps": self.steps, "covered_steps": self.covered, "programs": len(self.programs),
                 "background_compiles": self.background_compiles, **self.programs.stats,
                 "compiles": cache["compiles"], "executions": cache["executions"],
                 "fallbacks": torch_tpu.fallback_counts(), "weight_layouts": dict(weights.LAYOUTS)}
        tmp = f"{self.stats_path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(stats, f)
        os.replace(tmp, self.stats_path)
