"""One serving step's host-side plan: its bucket and its packed metadata (engine-neutral).

An engine describes each scheduled request as a ``StepRequest``-shaped object (the tokens the
host knows, where this step starts, the KV table row, the state slot, the sampling spec) and
how many tokens the step computes for it; ``build`` lays the step out and packs it.

Rows are the step's requests: decodes (one scheduled token) first, padded to a bucket of D rows,
then prefills (several tokens: prompts, chunks of them, recomputation after a resume) padded to
P rows. Tokens are laid out the same way: decode row i is token i, prefill tokens follow from D
on. What the host packs is only what it knows from the scheduler: token ids (-1 where the
device holds the id: the last sampled token of a running request), per row its first token,
token count, first position and state slot, its KV blocks, and its sampling parameters. The
step program derives positions, slot mapping, block-table lookups, query offsets and logits rows
from these on the device.

The bucket: tokens T, decode rows D and their key blocks Kd, prefill rows P with query length L
and key blocks Kp, and the sampler variant. Every size is a power of two with a floor
(``serving.buckets``), so steady decoding uses one program per (D, Kd). A step may also run in a
larger bucket that covers its own (``BucketKey.covers``; padding rows and tokens change nothing):
``build``'s ``choose`` picks it, which is how steps mixing prefills and decodes reuse programs
(``StepState``).
"""

import functools
from dataclasses import dataclass

import numpy as np

from .buckets import bucket, fine_bucket
from .packing import Layout, Section
from .sampler import SamplerVariant, SamplingSpec, fill_rows

@dataclass
class StepRequest:
    """A scheduled request as a step sees it (engines keep one per running request)."""

    req_id: str
    tokens: list  # token ids the host knows: the prompt, then (after a resume) earlier outputs
    num_prompt: int
    spec: SamplingSpec
    blocks: list  # the KV table row: block ids (vLLM) or slot ids (SGLang, block size 1)
    num_computed: int  # tokens already in the KV cache: this step's first position
    outputs: int = 0  # real samples launched so far (the RNG counter; min_tokens)
    slot: int = -1  # the row of the device state (last sampled token, penalty counts)
    fresh: bool = False  # the slot's device state starts with this step
    penalize_prompt: bool = True  # repetition penalty counts prompt tokens (vLLM) or not (SGLang)


# Flag bits per row.
REAL = 1  # the row's sample is an output token (not a discarded partial-prefill sample)
FRESH = 2  # the row's slot starts a new request's state this step


@dataclass(frozen=True)
class Limits:
    block_size: int
    vocab: int
    max_rows: int  # max_num_seqs
    max_blocks: int  # KV blocks of the longest sequence (max_model_len)
    spare_slot: int  # the state row padding writes go to
    row_floor: int = 8
    token_floor: int = 16
    length_floor: int = 16
    key_floor_tokens: int = 64  # smallest key window (tokens)
    # Decode rows always get the whole table width: their attention reads only each request's
    # own tokens (``paged_attention.reads_in_place``), so the width costs only its upload, and
    # decode buckets no longer multiply by key windows.
    full_decode_window: bool = False

    def key_blocks(self, needed: int) -> int:
        floor = -(-self.key_floor_tokens // self.block_size)
        cap = bucket(self.max_blocks)
        return fine_bucket(needed, floor=min(floor, cap), cap=cap)

    def decode_key_blocks(self, needed: int) -> int:
        return bucket(self.max_blocks) if self.full_decode_window else self.key_blocks(needed)


@dataclass(frozen=True)
class BucketKey:
    tokens: int
    decodes: int
    decode_blocks: int
    prefills: int
    prefill_len: int
    prefill_blocks: int
    variant: SamplerVariant
    penalty_tokens: int

    @property
    def rows(self) -> int:
        return self.decodes + self.prefills

    def overflow(self, other: "BucketKey") -> int:
        """How many of ``other``'s decode rows run as 1-token prefill rows in this bucket."""
        return max(0, other.decodes - self.decodes)

    def covers(self, other: "BucketKey", prefill_tokens: int) -> bool:
        """Whether a step of bucket ``other`` with ``prefill_tokens`` prefill tokens fits this
        bucket: the same sampler, every size at least as large, room for the prefill tokens after
        this bucket's decode rows. Decodes beyond this bucket's decode rows run as 1-token prefill
        rows (a prefill row computes any number of tokens), so a bucket with spare prefill rows
        also covers steps mixing arriving prompts with more running decodes than it has decode
        rows: the shapes of a burst."""
        extra = self.overflow(other)
        kept = other.decodes - extra
        return (self.variant == other.variant and self.penalty_tokens >= other.penalty_tokens
                and (not kept or self.decode_blocks >= other.decode_blocks)
                and self.prefills >= other.prefills + extra
                and (not other.prefills or (self.prefill_len >= other.prefill_len
                                            and self.prefill_blocks >= other.prefill_blocks))
                and (not extra or self.prefill_blocks >= other.decode_blocks)
                and self.tokens >= self.decodes + (prefill_tokens if other.prefills else 0) + extra)

    def cost(self, block_size: int) -> float:
        """A rough estimate of the step's work, in tokens through the model: a token's
        projections weigh about as much as 64 query-key pairs of attention."""
        pairs = (self.decodes * self.decode_blocks + self.prefills * self.prefill_len * self.prefill_blocks) * block_size
        return self.tokens + pairs / 64

    def describe(self) -> str:
        parts = [f"T={self.tokens}"]
        if self.decodes:
            parts.append(f"decode {self.decodes}x{self.decode_blocks} blocks")
        if self.prefills:
            parts.append(f"prefill {self.prefills}x{self.prefill_len} over {self.prefill_blocks} blocks")
        return ", ".join(parts)


@functools.lru_cache(maxsize=512)
def layout_for(key: BucketKey, limits: Limits) -> Layout:
    s = [Section("ids", "i32", (key.tokens,)), Section("rows", "i32", (key.rows, 4)),
         Section("flags", "i32", (key.rows,))]
    if key.decodes:
        s.append(Section("bt_decode", "i32", (key.decodes, key.decode_blocks)))
    if key.prefills:
        s.append(Section("bt_prefill", "i32", (key.prefills, key.prefill_blocks)))
    s += key.variant.sections(key.rows, limits.vocab, penalty_tokens=key.penalty_tokens)
    return Layout(s)


@dataclass
class StepBatch:
    key: BucketKey
    buffer: np.ndarray
    views: dict
    req_ids: list  # per real row, in row order
    rows: np.ndarray  # row index of each real request
    real: list  # whether each real request's sample is an output


def _penalty_entries(reqs):
    """(slot, token, kind) for requests whose penalty state starts now: prompt tokens (kind 0)
    and earlier outputs (kind 1, after a resume)."""
    out = []
    for r in reqs:
        if r.fresh and r.spec.uses_penalties():
            if r.penalize_prompt:
                out += [(r.slot, t, 0) for t in r.tokens[: r.num_prompt]]
            out += [(r.slot, t, 1) for t in r.tokens[r.num_prompt:]]
    return out


def build(reqs, counts, limits: Limits, grammar=None, choose=None) -> StepBatch:
    """``reqs``: the scheduled StepRequests (the scheduler's order), ``counts``: tokens each
    computes this step; ``grammar``: None or (request ids, bitmask rows); ``choose``: None or
    ``choose(key, prefill_tokens, decode_blocks)`` -> the bucket to run in (``key`` or one that
    covers it); ``decode_blocks``: the KV blocks the longest decoding request needs."""
    dec = [(r, n) for r, n in zip(reqs, counts) if n == 1]
    pre = [(r, n) for r, n in zip(reqs, counts) if n > 1]
    bs = limits.block_size
    d = bucket(len(dec), floor=limits.row_floor) if dec else 0
    p = bucket(len(pre), floor=1) if pre else 0
    pre_tokens = sum(n for _, n in pre)
    t = d if not pre else bucket(d + pre_tokens, floor=limits.token_floor)
    need = lambda group: max(-(-(r.num_computed + n) // bs) for r, n in group)  # noqa: E731
    decode_need = need(dec) if dec else 0
    kd = limits.decode_key_blocks(decode_need) if dec else 0
    kp = limits.key_blocks(need(pre)) if pre else 0
    length = bucket(max(n for _, n in pre), floor=limits.length_floor) if pre else 0
    ordered = dec + pre
    specs = [r.spec for r, _ in ordered]
    outputs = [r.outputs for r, _ in ordered]
    variant = SamplerVariant.for_batch(specs, limits.vocab, outputs, bitmask=grammar is not None,
                                       bucket=lambda n: bucket(n, floor=16))
    penalty = _penalty_entries(r for r, _ in ordered) if variant.penalties else []
    key = BucketKey(t, d, kd, p, length, kp, variant, bucket(len(penalty), floor=16) if variant.penalties else 0)
    if choose is not None:
        key = choose(key, pre_tokens, decode_need)
        d = key.decodes
        # Decodes past the bucket's decode rows run as 1-token prefill rows (``BucketKey.covers``);
        # the requests keep their order (``ordered``), only their rows change.
        dec, pre = dec[:d], dec[d:] + pre
    rows = np.concatenate([np.arange(len(dec)), d + np.arange(len(pre))]).astype(np.int64)
    layout = layout_for(key, limits)
    buf, v = layout.host_buffer()

    ids, rowv, flags = v["ids"], v["rows"], v["flags"]
    rowv[:, 3] = limits.spare_slot
    real = []
    token = 0
    for i, ((r, n), row) in enumerate(zip(ordered, rows)):
        if i == len(dec):
            token = d
        end = r.num_computed + n
        known = min(end, len(r.tokens))
        if known > r.num_computed:
            ids[token : token + known - r.num_computed] = r.tokens[r.num_computed : known]
        if end > known:
            if n != 1:
                raise RuntimeError(f"request {r.req_id}: {end - known} unknown tokens in a {n}-token step")
            ids[token] = -1
        rowv[row] = (token, n, r.num_computed, r.slot)
        is_real = end >= len(r.tokens)
        flags[row] = (REAL if is_real else 0) | (FRESH if r.fresh else 0)
        real.append(is_real)
        table_view = v["bt_decode"][row] if row < d else v["bt_prefill"][row - d]
        blocks = r.blocks[: table_view.shape[0]]
        table_view[: len(blocks)] = blocks
        token += n
    fill_rows(v, variant, specs, outputs, limits.vocab, rows)
    if variant.penalties:
        pt = v["penalty_tokens"]
        pt[:] = (limits.spare_slot, 0, 2)
        if penalty:
            pt[: len(penalty)] = penalty
    if grammar is not None:
        req_ids, bitmask = grammar
        v["bitmask"][:] = -1
        where = {r.req_id: row for (r, _), row in zip(ordered, rows)}
        for req_id, mask in zip(req_ids, bitmask):
            if req_id in where:
                v["bitmask"][where[req_id]] = mask
    for (r, _), is_real in zip(ordered, real):
        r.fresh = False
        r.outputs += is_real
    return StepBatch(key, buf, v, [r.req_id for r, _ in ordered], rows, real)
