"""A serving step end to end, engine-neutral (torch_tpu/serving: step_batch, step_inputs,
step_state): a toy attention model served through packed step metadata and a paged KV cache,
with requests arriving while others decode and prompts prefilled in chunks, so steps mix
prefills and decodes in many bucket shapes. Its greedy tokens equal the same model run on CPU
over whole sequences - with every step in its own bucket, and with steps run in larger
compiled buckets that cover them (padding rows and tokens change nothing)."""

import numpy as np
import pytest
import torch

from torch_tpu import _C
from torch_tpu.serving import step_inputs
from torch_tpu.serving.attention import grouped_attention
from torch_tpu.serving.paged_attention import decode_attention
from torch_tpu.serving.sampler import SamplerVariant, SamplingSpec
from torch_tpu.serving.step_batch import BucketKey, Limits, StepRequest, build, ragged_key
from torch_tpu.serving.step_state import StepState

BLOCK, BLOCKS, VOCAB, HIDDEN, HEADS, KV_HEADS, HEAD = 4, 64, 40, 16, 2, 1, 8
CHUNK = 8  # prefill chunk (tokens per step)


class Toy:
    """Embedding, one grouped-query attention layer with a residual, logits."""

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        shapes = dict(emb=(VOCAB, HIDDEN), wq=(HIDDEN, HEADS * HEAD), wk=(HIDDEN, KV_HEADS * HEAD),
                      wv=(HIDDEN, KV_HEADS * HEAD), wo=(HEADS * HEAD, HIDDEN), lm=(HIDDEN, VOCAB))
        self.cpu = {n: torch.randn(s, generator=g) for n, s in shapes.items()}
        self.dev = {n: w.to("tpu") for n, w in self.cpu.items()}

    def reference(self, prompt, new):
        """Greedy tokens on CPU, each from the whole sequence with causal attention."""
        w, seq = self.cpu, list(prompt)
        for _ in range(new):
            x = w["emb"][torch.tensor(seq)]
            n = len(seq)
            q = (x @ w["wq"]).reshape(n, HEADS, HEAD).transpose(0, 1)
            k = (x @ w["wk"]).reshape(n, KV_HEADS, HEAD).transpose(0, 1).repeat_interleave(HEADS // KV_HEADS, 0)
            v = (x @ w["wv"]).reshape(n, KV_HEADS, HEAD).transpose(0, 1).repeat_interleave(HEADS // KV_HEADS, 0)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = x + o.transpose(0, 1).reshape(n, HEADS * HEAD) @ w["wo"]
            seq.append(int((h[-1] @ w["lm"]).argmax()))
        return seq[len(prompt):]

    def make_step(self, key, layout):
        w = self.dev

        def step(packed, last_tokens, k_cache, v_cache):
            v = layout.device_views(packed)
            inputs = step_inputs.derive(v, key, BLOCK, last_tokens)
            x = w["emb"][inputs.input_ids.long()]
            t = x.shape[0]
            q = (x @ w["wq"]).reshape(t, HEADS, HEAD)
            k_cache.index_copy_(0, inputs.kv_slots, (x @ w["wk"]).reshape(t, KV_HEADS, HEAD))
            v_cache.index_copy_(0, inputs.kv_slots, (x @ w["wv"]).reshape(t, KV_HEADS, HEAD))
            result = torch.zeros(t + 1, HEADS, HEAD, device=x.device)
            for g in inputs.groups:
                size, length = g.token_index.shape
                if length == 1:  # as the engines: decodes (and a ragged step's tokens) read the cache in place
                    paged = lambda c: c.view(BLOCKS, BLOCK, KV_HEADS, HEAD)  # noqa: E731
                    out = decode_attention(q[g.token_index[:, 0]], paged(k_cache), paged(v_cache), g.block_table,
                                           g.position[:, 0], g.table_row, scale=HEAD ** -0.5)
                    result.index_copy_(0, torch.where(g.write_index < 0, t, g.write_index), out)
                    continue
                window = lambda c: c.view(BLOCKS, BLOCK, KV_HEADS, HEAD)[g.block_table].reshape(size, -1, KV_HEADS, HEAD)  # noqa: E731
                out = grouped_attention(q[g.token_index.reshape(-1)].reshape(size, length, HEADS, HEAD),
                                        window(k_cache), window(v_cache), g.position, HEAD ** -0.5)
                result.index_copy_(0, torch.where(g.write_index < 0, t, g.write_index), out.reshape(-1, HEADS, HEAD))
            h = x + result[:t].reshape(t, HEADS * HEAD) @ w["wo"]
            logits = h[inputs.logits_rows] @ w["lm"]
            return step_inputs.finish(logits, v, key, inputs, last_tokens)

        return step


def _serve(toy, state, kv, arrivals, new_tokens, lag=False):
    """A synchronous engine loop: ``arrivals`` = [(step, prompt)]; prompts prefill in chunks of
    CHUNK tokens, then decode one token per step. Returns each request's generated tokens.
    ``lag``: as with asynchronous scheduling, a step is planned before the host has the tokens
    the previous one sampled (the device supplies them from the slot state)."""
    pending = sorted(enumerate(arrivals), key=lambda a: a[1][0])
    running, generated, step, held = [], {}, 0, []
    blocks_each = BLOCKS // (len(arrivals) + 1)
    while pending or running:
        while pending and pending[0][1][0] <= step:
            i, (_, prompt) = pending.pop(0)
            blocks = list(range(1 + i * blocks_each, 1 + (i + 1) * blocks_each))  # block 0: padding
            running.append(StepRequest(req_id=f"r{i}", tokens=list(prompt), num_prompt=len(prompt),
                                       spec=SamplingSpec(), blocks=blocks, num_computed=0, slot=i, fresh=True))
            generated[f"r{i}"] = []
        step += 1
        if not running:
            continue
        counts = [1 if r.num_computed >= r.num_prompt else min(CHUNK, r.num_prompt - r.num_computed) for r in running]
        plan = state.plan(running, counts)
        for r, tok in held:
            r.tokens.append(tok)
        held = []
        out = state.launch(plan, toy.make_step, kv).cpu().numpy()
        tokens, _ = step_inputs.unpack_output(out, plan.rows, plan.key.variant)
        by_id = {rid: (int(tok), real) for rid, tok, real in zip(plan.req_ids, tokens, plan.real)}
        for r, n in zip(list(running), counts):
            r.num_computed += n
            tok, real = by_id[r.req_id]
            if real:
                if lag:
                    held.append((r, tok))
                else:
                    r.tokens.append(tok)
                generated[r.req_id].append(tok)
                if len(generated[r.req_id]) == new_tokens:
                    running.remove(r)
    return [generated[f"r{i}"] for i in range(len(arrivals))]


@pytest.fixture
def engine(strict_no_fallback):
    limits = Limits(block_size=BLOCK, vocab=VOCAB, max_rows=8, max_blocks=BLOCKS // 8, spare_slot=8,
                    row_floor=2, token_floor=8, length_floor=4, key_floor_tokens=8)
    state = StepState("test", limits, "tpu", cover_ratio=0)
    kv = [torch.zeros(BLOCKS * BLOCK, KV_HEADS, HEAD, device="tpu") for _ in range(2)]
    return Toy(), state, kv


FIRST = [(0, [3, 1, 4]), (0, [1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9]), (2, [2, 7]), (3, [1, 8, 2, 8, 1, 8, 2, 8, 4]),
         (3, [5, 9, 0, 4, 5, 2, 3, 5, 3, 6, 0, 2, 8, 7, 4, 7, 1]), (6, [6, 2, 6, 4, 3, 3, 8])]
SECOND = [(0, [7, 7, 1]), (1, [4, 4, 4, 4, 4]), (1, [9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), (4, [12, 11]),
          (5, [30, 31, 32, 33, 34, 35, 36, 37, 38, 39])]


def test_mixed_steps_match_cpu_in_own_and_covering_buckets(engine):
    toy, state, kv = engine
    new = 6
    got = _serve(toy, state, kv, FIRST, new)
    assert got == [toy.reference(p, new) for _, p in FIRST]
    assert state.covered == 0  # cover_ratio 0: every step compiled its own bucket
    own = len(state.programs)
    # Another arrival pattern, now allowed to run in compiled buckets that cover its steps; a
    # shape met twice gets its own program, compiled in the background.
    state.cover_ratio, state.promote_after = 2.0, 2
    captures = state.programs.stats["captures"]
    got = _serve(toy, state, kv, SECOND, new)
    assert got == [toy.reference(p, new) for _, p in SECOND]
    assert state.covered > 0
    new_programs = state.programs.stats["captures"] - captures
    assert new_programs < own, (new_programs, own)
    # Recurring shapes (and longer key windows ahead) were compiled off the serving path; once
    # ready, the same arrivals capture them, and nothing compiles on the serving thread.
    assert state.background_compiles > 0
    _C._wait_background_compiles()
    compiles = torch.tpu.compilation_cache_stats()["compiles"]
    background = state.background_compiles
    got = _serve(toy, state, kv, SECOND, new)
    assert got == [toy.reference(p, new) for _, p in SECOND]
    _C._wait_background_compiles()
    # (Whether a background program is first captured in the second run or this one depends on
    # how long its compile took; by now the recurring ones have been.)
    assert any(key in state.programs for key in state.programs._background)
    assert torch.tpu.compilation_cache_stats()["compiles"] - compiles <= state.background_compiles - background


class _DecodesAsPrefillRows(StepState):
    """Runs every step that mixes decodes and prefills in a prefill-only bucket that covers it:
    all its decodes become 1-token prefill rows."""

    overflowed = 0

    def _choose(self, key, prefill_tokens, decode_blocks=0):
        if not (key.decodes and key.prefills):
            return key
        big = BucketKey(tokens=key.tokens + key.decodes, decodes=0, decode_blocks=0,
                        prefills=key.prefills + key.decodes, prefill_len=key.prefill_len,
                        prefill_blocks=max(key.prefill_blocks, key.decode_blocks), variant=key.variant,
                        penalty_tokens=key.penalty_tokens)
        assert big.covers(key, prefill_tokens) and big.overflow(key) == key.decodes
        self.overflowed += 1
        return big


def test_decodes_run_as_one_token_prefill_rows(strict_no_fallback):
    limits = Limits(block_size=BLOCK, vocab=VOCAB, max_rows=8, max_blocks=BLOCKS // 8, spare_slot=8,
                    row_floor=2, token_floor=8, length_floor=4, key_floor_tokens=8)
    state = _DecodesAsPrefillRows("test", limits, "tpu", cover_ratio=0)
    kv = [torch.zeros(BLOCKS * BLOCK, KV_HEADS, HEAD, device="tpu") for _ in range(2)]
    toy, new = Toy(), 6
    # The host plans each step before it has the last sampled tokens: decodes moved to prefill
    # rows take theirs from the slot state on the device too.
    got = _serve(toy, state, kv, FIRST, new, lag=True)
    assert got == [toy.reference(p, new) for _, p in FIRST]
    assert state.overflowed > 0


def test_cover_rule():
    greedy = SamplerVariant.for_batch([SamplingSpec()], 40, [0], bitmask=False, bucket=lambda n: n)
    seeded = SamplerVariant.for_batch([SamplingSpec(temperature=1.0, seed=1)], 40, [0], bitmask=False,
                                      bucket=lambda n: n)
    small = BucketKey(tokens=32, decodes=8, decode_blocks=4, prefills=2, prefill_len=8, prefill_blocks=4,
                      variant=greedy, penalty_tokens=0)
    big = BucketKey(tokens=64, decodes=16, decode_blocks=6, prefills=4, prefill_len=16, prefill_blocks=4,
                    variant=greedy, penalty_tokens=0)
    assert big.covers(small, prefill_tokens=16) and not small.covers(big, prefill_tokens=16)
    assert not big.covers(small, prefill_tokens=49)  # 16 decode rows + 49 tokens > 64
    other = BucketKey(**{**big.__dict__, "variant": seeded})
    assert greedy != seeded and not other.covers(small, prefill_tokens=16)
    assert big.cost(4) > small.cost(4) > 0
    # Decodes beyond a bucket's decode rows fit its spare prefill rows (a burst's mixed shapes).
    burst = BucketKey(tokens=64, decodes=0, decode_blocks=0, prefills=16, prefill_len=8, prefill_blocks=4,
                      variant=greedy, penalty_tokens=0)
    assert burst.overflow(small) == 8 and burst.covers(small, prefill_tokens=16)
    assert not burst.covers(small, prefill_tokens=57)  # 8 one-token rows + 57 tokens > 64
    assert not BucketKey(**{**burst.__dict__, "prefills": 9}).covers(small, prefill_tokens=16)  # 2 + 8 rows
    assert not BucketKey(**{**burst.__dict__, "prefill_blocks": 3}).covers(small, prefill_tokens=16)
    np.testing.assert_allclose(small.cost(4), 32 + (8 * 4 + 2 * 8 * 4) * 4 / 64)


class _Job:
    def __init__(self, state):
        self.state = state


def test_choice_covers_transient_buckets_and_promotes_recurring_ones():
    greedy = SamplerVariant.for_batch([SamplingSpec()], 40, [0], bitmask=False, bucket=lambda n: n)
    limits = Limits(block_size=4, vocab=40, max_rows=32, max_blocks=16, spare_slot=32)
    state = StepState("test", limits, "tpu", cover_ratio=2.0, promote_after=3)
    decode = lambda rows, blocks: BucketKey(rows, rows, blocks, 0, 0, 0, greedy, 0)  # noqa: E731
    state.programs._graphs[decode(16, 8)] = object()  # a compiled bucket (the choice only reads keys)
    tail = decode(8, 8)  # costs half of the compiled one: covered; at its 3rd time, its own program is asked for
    assert [state._choose(tail, 0) for _ in range(2)] == [decode(16, 8)] * 2 and state._compile_next is None
    assert state._choose(tail, 0) == decode(16, 8) and state._compile_next == tail
    assert state.covered == 3
    # While it compiles in the background the cover keeps serving it; once ready, it runs in its own.
    state._compile_next, state.programs._background[tail] = None, _Job("pending")
    assert state._choose(tail, 0) == decode(16, 8) and state._compile_next is None
    state.programs._background[tail] = _Job("ready")
    assert state._choose(tail, 0, 4) == tail and state._compile_next is None
    # Decoding in its own bucket past half its key window, it compiles the next window ahead,
    # which nothing covers.
    assert state._choose(tail, 0, 5) == tail
    longer = decode(8, limits.key_blocks(9))
    assert longer.decode_blocks > 8 and state._compile_next == longer
    state._compile_next, state.programs._graphs[tail] = None, object()
    state.programs._background[longer] = _Job("pending")
    assert state._choose(tail, 0, 7) == tail and state._compile_next is None  # asked once
    del state.programs._graphs[tail]
    # A quarter of the cost: over the cover ratio, so its own program is compiled in the background
    # at once, and the cover serves it meanwhile (it is within interim_ratio times the ratio).
    assert state._choose(decode(4, 8), 0) == decode(16, 8) and state._compile_next == decode(4, 8)
    assert state._choose(decode(1, 8), 0) == decode(1, 8)  # 1/16 of the cost: captured on the spot
    assert state._choose(decode(16, 12), 0) == decode(16, 12)  # nothing covers a longer window
    # Past half of the whole table's window there is no longer one to compile ahead (this raised
    # "17 exceeds the largest bucket (16)" for every sequence past half of max_model_len).
    state._compile_next = None
    assert state._choose(decode(16, 16), 0, 12) == decode(16, 16) and state._compile_next is None
    # A step with prefills may run in a bucket up to twice as padded (each such shape is rare).
    mixed = BucketKey(24, 8, 8, 1, 8, 4, greedy, 0)
    state.programs._graphs[BucketKey(64, 16, 8, 2, 16, 4, greedy, 0)] = object()
    assert state._choose(mixed, 8) == BucketKey(64, 16, 8, 2, 16, 4, greedy, 0)
    state.cover_ratio = 0
    assert state._choose(decode(8, 6), 0) == decode(8, 6)


def test_ragged_layout_makes_one_decode_bucket_for_every_length():
    from torch_tpu.serving import paged_attention

    # The CPU plugin's decode attention reads the cache in place: a small table takes its whole width.
    assert paged_attention.reads_in_place(max_rows=256, max_blocks=32)
    assert not paged_attention.reads_in_place(max_rows=256, max_blocks=4096)  # a 4 MB table per step
    keys = {}
    for full in (False, True):
        limits = Limits(block_size=4, vocab=40, max_rows=8, max_blocks=64, spare_slot=8, key_floor_tokens=8,
                        ragged=full)
        keys[full] = set()
        for length in (3, 20, 100, 250):  # sequences growing through several key windows
            req = StepRequest(req_id="r", tokens=list(range(length)), num_prompt=2, spec=SamplingSpec(),
                              blocks=list(range(1, 65)), num_computed=length - 1, slot=0)
            keys[full].add(build([req], [1], limits).key)
    assert len(keys[False]) > 1
    assert len(keys[True]) == 1 and next(iter(keys[True])).decode_blocks == 64


def test_ragged_steps_match_cpu_and_compile_nothing_after_warm_up(strict_no_fallback):
    """The ragged layout: prompts arriving beside running decodes, in chunks, all run in the
    buckets warm-up compiled (decode buckets serve mixed steps of as many tokens and rows)."""
    limits = Limits(block_size=BLOCK, vocab=VOCAB, max_rows=8, max_blocks=BLOCKS // 8, spare_slot=8,
                    row_floor=2, token_floor=8, length_floor=4, key_floor_tokens=8, ragged=True)
    state = StepState("test", limits, "tpu")
    kv = [torch.zeros(BLOCKS * BLOCK, KV_HEADS, HEAD, device="tpu") for _ in range(2)]
    toy, new = Toy(), 6
    warmed = state.warm_up(8, toy.make_step, kv, max_tokens=8 * CHUNK)
    assert warmed == 2 * len(state._warm_up_shapes(8, 8 * CHUNK))  # greedy and temperature samplers
    compiles, captures = torch.tpu.compilation_cache_stats()["compiles"], state.programs.stats["captures"]
    for arrivals in (FIRST, SECOND):
        got = _serve(toy, state, kv, arrivals, new, lag=True)
        assert got == [toy.reference(p, new) for _, p in arrivals]
    assert state.covered > 0 and state.background_compiles == 0
    assert state.programs.stats["captures"] == captures
    assert torch.tpu.compilation_cache_stats()["compiles"] == compiles


def test_ragged_warm_up_shapes_and_cover_rule():
    limits = Limits(block_size=16, vocab=40, max_rows=256, max_blocks=128, spare_slot=256, ragged=True)
    state = StepState("test", limits, "tpu")
    decodes = [(1, 1), (16, 16), (32, 32), (64, 64), (128, 128), (256, 256)]
    assert state._warm_up_shapes(256, 2048) == decodes + [(512, 256), (2048, 256)]
    assert state._warm_up_shapes(256, 4096) == decodes + [(512, 256), (2048, 256), (4096, 256)]
    assert state._warm_up_shapes(256, 256) == decodes
    split = StepState("test", Limits(block_size=16, vocab=40, max_rows=256, max_blocks=128, spare_slot=256), "tpu")
    assert split._warm_up_shapes(256, 2048) == decodes
    greedy = SamplerVariant.for_batch([SamplingSpec()], 40, [0], bitmask=False, bucket=lambda n: n)
    big, small = ragged_key(512, 256, limits, greedy), ragged_key(64, 16, limits, greedy)
    assert big.decode_blocks == 128 and big.has_prefill and not ragged_key(16, 16, limits, greedy).has_prefill
    assert big.covers(small, prefill_tokens=40) and not small.covers(big, prefill_tokens=300)
    assert not ragged_key(64, 8, limits, greedy).covers(small, prefill_tokens=40)  # too few rows
    assert not small.covers(ragged_key(64, 8, limits, greedy), prefill_tokens=65)  # too few tokens
    split_key = BucketKey(64, 16, 8, 0, 0, 0, greedy, 0)
    assert not big.covers(split_key, 0) and not split_key.covers(small, 40)
    assert big.cost(16) == 512 + 256 and "256 ragged rows" in big.describe()


def test_ragged_warm_up_keeps_rows_within_their_table(strict_no_fallback):
    """One row of at most 8 tokens (its table) and 64 tokens a step: warm-up's long buckets
    shrink to what a row can hold instead of asking the kernel for positions past the table."""
    limits = Limits(block_size=BLOCK, vocab=VOCAB, max_rows=1, max_blocks=2, spare_slot=1, row_floor=1,
                    token_floor=8, ragged=True)
    state = StepState("test", limits, "tpu")
    kv = [torch.zeros(BLOCKS * BLOCK, KV_HEADS, HEAD, device="tpu") for _ in range(2)]
    assert state.warm_up(1, Toy().make_step, kv, max_tokens=64) == 2 * 2  # (1, 1) and (8, 1), two samplers
    assert {k.tokens for k in state.programs.keys()} == {1, 8}
