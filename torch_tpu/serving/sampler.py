"""Token sampling as vLLM defines it, in device ops with no host read (part of the step program).

Per request row, in vLLM's order (``vllm/v1/sample/sampler.py``):
  grammar bitmask -> raw log-probs (when asked) -> allowed-token whitelist -> logit edits
  (logit bias; min-tokens bans stop tokens) -> penalties (repetition, frequency, presence) ->
  greedy argmax -> temperature -> min-p -> top-k -> top-p -> random draw
and a row with temperature < 1e-5 takes the greedy token. The random draw is the same
exponential-race vLLM uses (argmax of probs / q with q ~ Exp(1)), with q from ``rng`` keyed by
the request's seed and output position, so a seeded request gives the same tokens whatever
batch it runs in. Top-k and top-p keep exactly the tokens vLLM's sort-based masks keep, found by
bisection over the float bits (XLA's CPU sort of a vocabulary row costs ~15 ms; 31 masked
reductions cost well under one). Top log-probs use repeated argmax for the same reason.

The batch's needs pick a ``SamplerVariant`` (part of the program's bucket key): a greedy batch
pays for one argmax only.
"""

import random
from dataclasses import dataclass, field

import numpy as np
import torch

from . import rng
from .packing import Section

SAMPLING_EPS = 1e-5
_NEG_INF = float("-inf")


@dataclass
class SamplingSpec:
    """One request's sampling parameters (engine-neutral)."""

    temperature: float = 0.0
    top_k: int = 0  # <= 0 or >= vocab: off
    top_p: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None  # None: a random seed is drawn once per request
    logprobs: int | None = None  # top log-probs to return (0: only the sampled token's)
    logit_bias: dict = field(default_factory=dict)  # token -> additive bias
    min_tokens: int = 0
    stop_token_ids: tuple = ()  # banned until min_tokens outputs exist
    allowed_token_ids: tuple | None = None

    def __post_init__(self):
        if self.seed is None:
            self.seed = random.getrandbits(63)

    @property
    def is_random(self) -> bool:
        return self.temperature >= SAMPLING_EPS

    def uses_penalties(self) -> bool:
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0

    def top_k_active(self, vocab: int) -> bool:
        return self.is_random and 0 < self.top_k < vocab

    def _banned(self, num_outputs: int) -> tuple:
        """Stop tokens banned at this step (until min_tokens outputs exist)."""
        return self.stop_token_ids if num_outputs < self.min_tokens else ()

    def num_edits(self, num_outputs: int) -> int:
        """``len(self.edits(num_outputs))``, without building them."""
        return len(self.logit_bias) + len(self._banned(num_outputs))

    def edits(self, num_outputs: int):
        """(token, additive value) pairs for this step."""
        out = [(int(t), float(b)) for t, b in self.logit_bias.items()]
        out += [(int(t), _NEG_INF) for t in self._banned(num_outputs)]
        return out


@dataclass(frozen=True)
class SamplerVariant:
    """What a batch needs; each distinct variant is its own program."""

    random: bool = False
    top_k: bool = False
    top_p: bool = False
    min_p: bool = False
    penalties: bool = False
    edits: int = 0  # logit-edit slots (bucketed)
    allowed: int = 0  # allowed-token slots (bucketed)
    bitmask: bool = False
    logprobs: int = -1  # -1: none

    @staticmethod
    def for_batch(specs, vocab, num_outputs, bitmask=False, bucket=lambda n: n):
        rand = [s for s in specs if s.is_random]
        n_edits = sum(s.num_edits(n) for s, n in zip(specs, num_outputs))
        n_allowed = sum(len(s.allowed_token_ids) for s in specs if s.allowed_token_ids is not None)
        want = [s.logprobs for s in specs if s.logprobs is not None]
        return SamplerVariant(
            random=bool(rand),
            top_k=any(s.top_k_active(vocab) for s in rand),
            top_p=any(s.top_p < 1.0 for s in rand),
            min_p=any(s.min_p > 0.0 for s in rand),
            penalties=any(s.uses_penalties() for s in specs),
            edits=bucket(n_edits) if n_edits else 0,
            allowed=bucket(n_allowed) if n_allowed else 0,
            bitmask=bool(bitmask),
            logprobs=max(want) if want else -1,
        )

    def sections(self, rows: int, vocab: int, penalty_tokens: int = 0):
        """The packed sections this variant reads (``penalty_tokens``: slots for the prompt and
        earlier output tokens of requests whose penalty state starts this step)."""
        s = []
        if self.random:
            s += [Section("temperature", "f32", (rows,)), Section("seed", "i32", (rows, 2)),
                  Section("counter", "i32", (rows,))]
        if self.top_k:
            s.append(Section("top_k", "i32", (rows,)))
        if self.top_p:
            s.append(Section("top_p", "f32", (rows,)))
        if self.min_p:
            s.append(Section("min_p", "f32", (rows,)))
        if self.penalties:
            s += [Section("penalties", "f32", (rows, 3)), Section("penalty_tokens", "i32", (penalty_tokens, 3))]
        if self.edits:
            s += [Section("edit_index", "i32", (self.edits, 2)), Section("edit_value", "f32", (self.edits,))]
        if self.allowed:
            s += [Section("allowed", "i32", (self.allowed, 2)), Section("restricted", "i32", (rows,))]
        if self.bitmask:
            s.append(Section("bitmask", "i32", (rows, (vocab + 31) // 32)))
        return s


def fill_rows(views, variant: SamplerVariant, specs, num_outputs, vocab, rows=None):
    """Writes the per-row sampling sections: ``specs[i]`` goes to row ``rows[i]`` (default i).
    Padding rows keep their defaults: greedy, no edits, unrestricted."""
    rows = np.arange(len(specs)) if rows is None else np.asarray(rows, dtype=np.int64)
    if variant.random:
        views["temperature"][rows] = [s.temperature for s in specs]
        seeds = np.array([s.seed & 0xFFFFFFFFFFFFFFFF for s in specs], dtype=np.uint64)
        views["seed"][rows, 0] = (seeds & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)
        views["seed"][rows, 1] = (seeds >> np.uint64(32)).astype(np.uint32).view(np.int32)
        views["counter"][rows] = num_outputs
    if variant.top_k:
        views["top_k"][:] = vocab
        views["top_k"][rows] = [s.top_k if s.top_k_active(vocab) else vocab for s in specs]
    if variant.top_p:
        views["top_p"][:] = 1.0
        views["top_p"][rows] = [s.top_p if s.is_random else 1.0 for s in specs]
    if variant.min_p:
        views["min_p"][rows] = [s.min_p if s.is_random else 0.0 for s in specs]
    if variant.penalties:
        views["penalties"][:, 2] = 1.0
        views["penalties"][rows] = [(s.presence_penalty, s.frequency_penalty, s.repetition_penalty) for s in specs]
    if variant.edits:
        k = 0
        for row, s, count in zip(rows, specs, num_outputs):
            for tok, val in s.edits(count):
                views["edit_index"][k] = (row, tok)
                views["edit_value"][k] = val
                k += 1
    if variant.allowed:
        views["allowed"][:, 0] = len(views["restricted"])  # padding: the spare row
        k = 0
        for row, s in zip(rows, specs):
            if s.allowed_token_ids is not None:
                views["restricted"][row] = 1
                for tok in s.allowed_token_ids:
                    views["allowed"][k] = (row, tok)
                    k += 1


@dataclass
class PenaltyState:
    """Per-slot device state for penalties: output token counts and the prompt-token mask
    (one spare slot at the end takes the writes of padding rows)."""

    counts: torch.Tensor  # [slots + 1, vocab] int32
    prompt_mask: torch.Tensor  # [slots + 1, vocab] bool

    @staticmethod
    def allocate(slots: int, vocab: int, device) -> "PenaltyState":
        return PenaltyState(torch.zeros(slots + 1, vocab, dtype=torch.int32, device=device),
                            torch.zeros(slots + 1, vocab, dtype=torch.bool, device=device))

    def tensors(self):
        return [self.counts, self.prompt_mask]


def _ordered_bits(x: torch.Tensor) -> torch.Tensor:
    """float32 -> int64 keys in the same order as the floats."""
    b = x.view(torch.int32).long()
    return torch.where(b < 0, b ^ 0x7FFFFFFF, b)


def _kth_largest_key(keys: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Per row, the largest t with count(keys >= t) >= k (the k-th largest key)."""
    lo = torch.full((keys.shape[0],), -(2**31), dtype=torch.int64, device=keys.device)
    hi = torch.full_like(lo, 2**31 - 1)
    k = k.long()
    for _ in range(32):
        mid = (lo + hi + 1) >> 1
        ok = (keys >= mid[:, None]).sum(-1) >= k
        lo = torch.where(ok, mid, lo)
        hi = torch.where(ok, hi, mid - 1)
    return lo


def _top_p_key(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Per row, the largest t with sum(probs[key < t]) <= 1 - top_p: vLLM's top-p keeps
    exactly the tokens with key >= t (its ascending cumsum <= 1 - p masks the rest)."""
    keys = _ordered_bits(probs)
    budget = (1.0 - top_p.float())[:, None]
    lo = torch.zeros(probs.shape[0], dtype=torch.int64, device=probs.device)
    hi = torch.full_like(lo, 0x7F800001)
    for _ in range(31):
        mid = (lo + hi + 1) >> 1
        below = torch.where(keys < mid[:, None], probs, 0.0).sum(-1, keepdim=True)
        ok = (below <= budget).squeeze(1)
        lo = torch.where(ok, mid, lo)
        hi = torch.where(ok, hi, mid - 1)
    return lo, keys


def _top_n(values: torch.Tensor, n: int):
    """(values, indices) of the n largest per row, largest first (repeated argmax)."""
    vals, idxs = [], []
    work = values
    for _ in range(n):
        i = work.argmax(dim=-1, keepdim=True)
        vals.append(values.gather(1, i))
        idxs.append(i)
        work = work.scatter(1, i, _NEG_INF)
    return torch.cat(vals, 1), torch.cat(idxs, 1)


def _apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    vocab = logits.shape[1]
    cols = torch.arange(vocab, device=logits.device, dtype=torch.int64)
    words = bitmask.long()[:, cols >> 5]  # [R, V]
    allowed = ((words >> (cols & 31)[None, :]) & 1) == 1
    return logits.masked_fill(~allowed, _NEG_INF)


def _apply_penalties(logits, v, state: PenaltyState, slots):
    counts = state.counts[slots].float()
    seen = state.prompt_mask[slots] | (counts > 0)
    pen = v["penalties"]
    presence, frequency, repetition = pen[:, 0:1], pen[:, 1:2], pen[:, 2:3]
    rep = torch.where(seen, repetition, 1.0)
    logits = logits * torch.where(logits > 0, 1.0 / rep, rep)
    logits = logits - frequency * counts
    return logits - presence * (counts > 0).float()


def prepare_penalty_state(state: PenaltyState, v, slots, fresh):
    """Resets the slots of requests that start here and records their prompt (kind 0) and
    earlier output (kind 1) tokens; padding entries point at the spare slot."""
    spare = state.counts.shape[0] - 1
    target = torch.where(fresh.bool(), slots.long(), spare)
    zeros_c = torch.zeros(slots.shape[0], state.counts.shape[1], dtype=torch.int32, device=slots.device)
    state.counts.index_copy_(0, target, zeros_c)
    state.prompt_mask.index_copy_(0, target, zeros_c.bool())
    toks = v["penalty_tokens"]
    slot, tok, kind = toks[:, 0].long(), toks[:, 1].long(), toks[:, 2]
    state.prompt_mask.index_put_((torch.where(kind == 0, slot, spare), tok), torch.ones_like(kind, dtype=torch.bool))
    state.counts.index_put_((torch.where(kind == 1, slot, spare), tok), (kind == 1).int(), accumulate=True)


def record_sampled(state: PenaltyState, slots, tokens, real):
    """Counts this step's real outputs (padding and discarded rows go to the spare slot)."""
    spare = state.counts.shape[0] - 1
    target = torch.where(real.bool(), slots.long(), spare)
    state.counts.index_put_((target, tokens.long()), torch.ones_like(tokens, dtype=torch.int32), accumulate=True)


def sample(logits: torch.Tensor, v: dict, variant: SamplerVariant, penalty_state=None, slots=None):
    """Samples one token per row. ``v``: the packed views; returns (tokens int32 [R],
    logprobs) where logprobs is None or (token ids int32 [R, N+1] - the sampled token first -,
    log-probs float32 [R, N+1], rank of the sampled token int32 [R])."""
    rows, vocab = logits.shape
    logits = logits.float()
    if variant.bitmask:
        logits = _apply_bitmask(logits, v["bitmask"])
    raw_logprobs = logits.log_softmax(-1) if variant.logprobs >= 0 else None
    if variant.allowed:
        pairs = v["allowed"].long()
        mask = torch.zeros(rows + 1, vocab, dtype=torch.bool, device=logits.device)
        mask = mask.index_put((pairs[:, 0], pairs[:, 1]), torch.ones_like(pairs[:, 0], dtype=torch.bool))
        banned = v["restricted"].bool()[:, None] & ~mask[:rows]
        logits = logits.masked_fill(banned, _NEG_INF)
    if variant.edits:
        idx = v["edit_index"].long()
        logits = logits.index_put((idx[:, 0], idx[:, 1]), v["edit_value"], accumulate=True)
    if variant.penalties:
        logits = _apply_penalties(logits, v, penalty_state, slots.long())
    tokens = logits.argmax(dim=-1)
    if variant.random:
        temp = v["temperature"]
        scaled = logits / torch.where(temp < SAMPLING_EPS, 1.0, temp)[:, None]
        if variant.min_p:
            probs = scaled.softmax(-1)
            floor = probs.amax(-1, keepdim=True) * v["min_p"][:, None]
            scaled = scaled.masked_fill(probs < floor, _NEG_INF)
        if variant.top_k:
            keys = _ordered_bits(scaled)
            scaled = scaled.masked_fill(keys < _kth_largest_key(keys, v["top_k"])[:, None], _NEG_INF)
        probs = scaled.softmax(-1)
        if variant.top_p:
            th, keys = _top_p_key(probs, v["top_p"])
            probs = scaled.masked_fill(keys < th[:, None], _NEG_INF).softmax(-1)
        seed = v["seed"]
        q = rng.exponential(rng.row_keys(seed[:, 0], seed[:, 1], v["counter"]), vocab)
        drawn = (probs / q).argmax(dim=-1)
        tokens = torch.where(temp < SAMPLING_EPS, tokens, drawn)
    tokens = tokens.to(torch.int32)
    if raw_logprobs is None:
        return tokens, None
    chosen = raw_logprobs.gather(1, tokens.long()[:, None])
    rank = (raw_logprobs >= chosen).sum(-1).to(torch.int32)
    ids, vals = tokens[:, None], chosen
    if variant.logprobs > 0:
        top_vals, top_ids = _top_n(raw_logprobs, variant.logprobs)
        ids = torch.cat([ids, top_ids.to(torch.int32)], 1)
        vals = torch.cat([vals, top_vals], 1)
    return tokens, (ids, vals, rank)
