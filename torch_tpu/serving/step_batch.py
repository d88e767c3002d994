"""One serving step's host-side plan: its bucket and its packed metadata (engine-neutral).

An engine describes each scheduled request as a ``StepRequest``-shaped object (the tokens the
host knows, where this step starts, the KV table row, the state slot, the sampling spec) and
how many tokens the step computes for it; ``build`` lays the step out and packs it.

Rows are the step's requests; their tokens are laid out one row after another. What the host
packs is only what it knows from the scheduler: token ids (-1 where the device holds the id: the
last sampled token of a running request), per row its first token, token count, first position
and state slot, its KV blocks, and its sampling parameters. The step program derives positions,
slot mapping, block-table lookups, query offsets and logits rows from these on the device.

Two layouts, by what the plugin's attention can do (``Limits.ragged``):

* **ragged** (the plugin reads the paged cache in place, ``paged_attention.reads_in_place``):
  every row reads the whole table width, whatever its token count, and the bucket is only tokens
  T, rows R and the sampler variant. Rows with one token (decodes) and rows with many (prompts,
  chunks, recomputation after a resume) are alike, so a step mixing arriving prompts with running
  decodes runs in any bucket with enough tokens and rows: ``StepState.warm_up`` compiles a short
  ladder of them and a server never compiles after warm-up.
* **split** (elsewhere: the attention gathers each request's key window): decodes (one token)
  first, padded to a bucket of D rows with Kd key blocks, then prefills padded to P rows of query
  length L over Kp key blocks. Decode row i is token i, prefill tokens follow from D on.

Every size is a power of two with a floor (``serving.buckets``), so steady decoding uses one
program per bucket. A step may also run in a larger bucket that covers its own
(``BucketKey.covers``; padding rows and tokens change nothing): ``build``'s ``choose`` picks it,
which is how steps of passing shapes reuse programs (``StepState``).
"""

import functools
import itertools
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
    # The ragged layout (module docstring): every row reads the whole table in place
    # (``paged_attention.reads_in_place``), so buckets no longer multiply by key windows.
    ragged: bool = False

    def table_width(self) -> int:
        """Key blocks of the widest window (the whole table)."""
        return bucket(self.max_blocks)

    def key_blocks(self, needed: int) -> int:
        floor = -(-self.key_floor_tokens // self.block_size)
        cap = self.table_width()
        return fine_bucket(needed, floor=min(floor, cap), cap=cap)


@dataclass(frozen=True)
class BucketKey:
    """A step's shapes. Split layout: ``decodes`` rows of one token over ``decode_blocks`` key
    blocks, then ``prefills`` rows of up to ``prefill_len`` tokens over ``prefill_blocks``. Ragged
    layout (``ragged``): ``decodes`` counts every row, whatever its tokens, ``decode_blocks`` is
    the table width, and there are no prefill rows."""

    tokens: int
    decodes: int
    decode_blocks: int
    prefills: int
    prefill_len: int
    prefill_blocks: int
    variant: SamplerVariant
    penalty_tokens: int
    ragged: bool = False

    @property
    def rows(self) -> int:
        return self.decodes + self.prefills

    def overflow(self, other: "BucketKey") -> int:
        """How many of ``other``'s decode rows run as 1-token prefill rows in this bucket."""
        return 0 if self.ragged else max(0, other.decodes - self.decodes)

    def covers(self, other: "BucketKey", prefill_tokens: int) -> bool:
        """Whether a step of bucket ``other`` with ``prefill_tokens`` prefill tokens (ragged: all
        its tokens) fits this bucket: the same layout and sampler, every size at least as large.
        Ragged, that is all: enough tokens and rows. Split, there must be room for the prefill
        tokens after this bucket's decode rows, and decodes beyond this bucket's decode rows run
        as 1-token prefill rows (a prefill row computes any number of tokens), so a bucket with
        spare prefill rows also covers steps mixing arriving prompts with more running decodes
        than it has decode rows: the shapes of a burst."""
        if self.variant != other.variant or self.penalty_tokens < other.penalty_tokens or self.ragged != other.ragged:
            return False
        if self.ragged:
            return (self.decodes >= other.decodes and self.decode_blocks >= other.decode_blocks
                    and self.tokens >= prefill_tokens)
        extra = self.overflow(other)
        kept = other.decodes - extra
        return ((not kept or self.decode_blocks >= other.decode_blocks)
                and self.prefills >= other.prefills + extra
                and (not other.prefills or (self.prefill_len >= other.prefill_len
                                            and self.prefill_blocks >= other.prefill_blocks))
                and (not extra or self.prefill_blocks >= other.decode_blocks)
                and self.tokens >= self.decodes + (prefill_tokens if other.prefills else 0) + extra)

    @property
    def has_prefill(self) -> bool:
        """Whether some row computes several tokens (a shape met as requests arrive)."""
        return bool(self.prefills) or (self.ragged and self.tokens > self.decodes)

    def cost(self, block_size: int) -> float:
        """A rough estimate of the step's work, in tokens through the model. Split: a token's
        projections weigh about as much as 64 query-key pairs of the padded windows. Ragged: the
        attention reads only real keys, so padding costs its tokens' projections and its rows'
        logits (about a token each)."""
        if self.ragged:
            return self.tokens + self.decodes
        pairs = (self.decodes * self.decode_blocks + self.prefills * self.prefill_len * self.prefill_blocks) * block_size
        return self.tokens + pairs / 64

    def describe(self) -> str:
        parts = [f"T={self.tokens}"]
        if self.ragged:
            parts.append(f"{self.decodes} ragged rows over {self.decode_blocks} blocks")
        elif self.decodes:
            parts.append(f"decode {self.decodes}x{self.decode_blocks} blocks")
        if self.prefills:
            parts.append(f"prefill {self.prefills}x{self.prefill_len} over {self.prefill_blocks} blocks")
        return ", ".join(parts)


def ragged_key(tokens: int, rows: int, limits: "Limits", variant: SamplerVariant, penalty_tokens: int = 0) -> BucketKey:
    """The ragged bucket of ``tokens`` tokens and ``rows`` rows."""
    return BucketKey(tokens, rows, limits.table_width(), 0, 0, 0, variant, penalty_tokens, ragged=True)


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


def _fill_tables(view, tables):
    """Writes each row's KV blocks (cut to the view's width) to the first rows of ``view``; the
    rest of a row keeps its zeros."""
    width = view.shape[1]
    cut = [b[:width] for b in tables]
    lengths = np.fromiter((len(b) for b in cut), dtype=np.int64, count=len(cut))
    view[: len(cut)][np.arange(width) < lengths[:, None]] = list(itertools.chain.from_iterable(cut))


def build(reqs, counts, limits: Limits, grammar=None, choose=None) -> StepBatch:
    """``reqs``: the scheduled StepRequests (the scheduler's order), ``counts``: tokens each
    computes this step; ``grammar``: None or (request ids, bitmask rows); ``choose``: None or
    ``choose(key, prefill_tokens, decode_blocks)`` -> the bucket to run in (``key`` or one that
    covers it); ``decode_blocks``: the KV blocks the longest decoding request needs."""
    dec = [(r, n) for r, n in zip(reqs, counts) if n == 1]
    pre = [(r, n) for r, n in zip(reqs, counts) if n > 1]
    bs = limits.block_size
    ordered = dec + pre
    specs = [r.spec for r, _ in ordered]
    outputs = [r.outputs for r, _ in ordered]
    variant = SamplerVariant.for_batch(specs, limits.vocab, outputs, bitmask=grammar is not None,
                                       bucket=lambda n: bucket(n, floor=16))
    penalty = _penalty_entries(r for r, _ in ordered) if variant.penalties else []
    penalty_bucket = bucket(len(penalty), floor=16) if variant.penalties else 0
    need = lambda group: max(-(-(r.num_computed + n) // bs) for r, n in group)  # noqa: E731
    if limits.ragged:
        # Every row in the one group, its tokens right after the previous row's.
        r = bucket(len(ordered), floor=limits.row_floor)
        total = sum(counts)
        t = r if not pre else bucket(total, floor=limits.token_floor)
        key = ragged_key(t, r, limits, variant, penalty_bucket)
        if choose is not None:
            key = choose(key, total, need(ordered))
        dec, pre, d = ordered, [], key.decodes
    else:
        d = bucket(len(dec), floor=limits.row_floor) if dec else 0
        p = bucket(len(pre), floor=1) if pre else 0
        pre_tokens = sum(n for _, n in pre)
        t = d if not pre else bucket(d + pre_tokens, floor=limits.token_floor)
        decode_need = need(dec) if dec else 0
        kd = limits.key_blocks(decode_need) if dec else 0
        kp = limits.key_blocks(need(pre)) if pre else 0
        length = bucket(max(n for _, n in pre), floor=limits.length_floor) if pre else 0
        key = BucketKey(t, d, kd, p, length, kp, variant, penalty_bucket)
        if choose is not None:
            key = choose(key, pre_tokens, decode_need)
            d = key.decodes
            # Decodes past the bucket's decode rows run as 1-token prefill rows
            # (``BucketKey.covers``); the requests keep their order (``ordered``), only their rows change.
            dec, pre = dec[:d], dec[d:] + pre
    rows = np.concatenate([np.arange(len(dec)), d + np.arange(len(pre))]).astype(np.int64)
    layout = layout_for(key, limits)
    buf, v = layout.host_buffer()

    # Per row: its token ids (decode rows' runs first; prefill rows' from token d on), its row
    # metadata, flags and KV table, gathered in lists and written with one assignment each.
    id_runs, tables = ([], []), ([], [])
    row_meta, row_flags, real = [], [], []
    token = 0
    for i, (r, n) in enumerate(ordered):
        part = i >= len(dec)
        if i == len(dec):
            token = d
        end = r.num_computed + n
        known = min(end, len(r.tokens))
        if known > r.num_computed:
            id_runs[part].extend(r.tokens[r.num_computed : known])
        if end > known:
            if n != 1:
                raise RuntimeError(f"request {r.req_id}: {end - known} unknown tokens in a {n}-token step")
            id_runs[part].append(-1)
        row_meta.append((token, n, r.num_computed, r.slot))
        is_real = end >= len(r.tokens)
        row_flags.append((REAL if is_real else 0) | (FRESH if r.fresh else 0))
        real.append(is_real)
        tables[part].append(r.blocks)
        token += n
    v["rows"][:, 3] = limits.spare_slot
    v["rows"][rows] = row_meta
    v["flags"][rows] = row_flags
    v["ids"][: len(id_runs[0])] = id_runs[0]
    v["ids"][d : d + len(id_runs[1])] = id_runs[1]
    if tables[0]:
        _fill_tables(v["bt_decode"], tables[0])
    if tables[1]:
        _fill_tables(v["bt_prefill"], tables[1])
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
