"""The serving sampler (torch_tpu/serving/sampler.py): on tpu it equals the same code on the CPU,
and each rule equals a plain reference written the way vLLM's sampler states it (sort-based
top-k/top-p, softmax min-p, penalties as in vLLM's apply_penalties). The random draw is checked
for reproducibility per seed and position, independence across them, and its distribution."""

import numpy as np
import pytest
import torch

from torch_tpu.serving import rng
from torch_tpu.serving.packing import Layout, Section
from torch_tpu.serving.sampler import PenaltyState, SamplerVariant, SamplingSpec, fill_rows, prepare_penalty_state, record_sampled, sample

VOCAB = 300


@pytest.fixture(autouse=True)
def _no_fallback(strict_no_fallback):
    yield


def _pack(variant, specs, outputs, rows=None, penalty_tokens=()):
    rows = rows or len(specs)
    sections = variant.sections(rows, VOCAB, penalty_tokens=max(1, len(penalty_tokens)) if variant.penalties else 0)
    layout = Layout(sections)
    buf, views = layout.host_buffer()
    fill_rows(views, variant, specs, outputs, VOCAB)
    if variant.penalties:
        views["penalty_tokens"][:] = (rows, 0, 2)
        for i, t in enumerate(penalty_tokens):
            views["penalty_tokens"][i] = t
    return layout, buf


def _run(device, logits, layout, buf, variant, state=None, slots=None):
    packed = torch.from_numpy(buf).to(device)
    v = layout.device_views(packed)
    return sample(logits.to(device), v, variant, state, slots)


def _reference_mask(logits, spec):
    """vLLM's own formulation: temperature, min-p, sort-based top-k then top-p."""
    x = logits.clone() / spec.temperature
    if spec.min_p > 0:
        p = x.softmax(-1)
        x[p < p.max() * spec.min_p] = float("-inf")
    s, idx = x.sort(descending=False)
    if 0 < spec.top_k < VOCAB:
        s[s < s[VOCAB - spec.top_k]] = float("-inf")
    if spec.top_p < 1.0:
        cum = s.softmax(-1).cumsum(-1)
        m = cum <= 1 - spec.top_p
        m[-1] = False
        s[m] = float("-inf")
    return torch.empty_like(x).scatter_(0, idx, s).isinf()


def test_rng_matches_cpu_and_depends_on_seed_and_position():
    seeds = torch.tensor([[1, 0], [1, 0], [2, 0], [1, 7]], dtype=torch.int32)
    counter = torch.tensor([5, 6, 5, 5], dtype=torch.int32)
    keys = rng.row_keys(seeds[:, 0], seeds[:, 1], counter)
    u_cpu = rng.uniform(keys, 4096)
    keys_t = rng.row_keys(seeds[:, 0].to("tpu"), seeds[:, 1].to("tpu"), counter.to("tpu"))
    assert torch.equal(keys_t.cpu(), keys)
    assert torch.equal(rng.uniform(keys_t, 4096).cpu(), u_cpu)
    assert ((u_cpu > 0) & (u_cpu < 1)).all()
    for a, b in [(0, 1), (0, 2), (0, 3)]:
        assert (u_cpu[a] != u_cpu[b]).float().mean() > 0.99
    # Uniform: mean 1/2, variance 1/12, no bias in the low bits' histogram.
    assert abs(u_cpu.mean().item() - 0.5) < 0.01
    assert abs(u_cpu.var().item() - 1 / 12) < 0.005
    hist = torch.histc(u_cpu[0], bins=8, min=0, max=1)
    assert (hist - 512).abs().max() < 90


def test_greedy_and_logprobs_match_cpu():
    torch.manual_seed(0)
    logits = torch.randn(5, VOCAB) * 3
    specs = [SamplingSpec(logprobs=3), SamplingSpec(logprobs=0), SamplingSpec(), SamplingSpec(logprobs=1), SamplingSpec()]
    variant = SamplerVariant.for_batch(specs, VOCAB, [0] * 5)
    assert not variant.random and variant.logprobs == 3
    layout, buf = _pack(variant, specs, [0] * 5)
    tok_cpu, lp_cpu = _run("cpu", logits, layout, buf, variant)
    tok, lp = _run("tpu", logits, layout, buf, variant)
    assert torch.equal(tok.cpu(), tok_cpu)
    assert torch.equal(tok_cpu.long(), logits.argmax(-1))
    ids, vals, rank = lp
    ref = logits.log_softmax(-1)
    top = ref.topk(3, dim=-1)
    assert torch.equal(ids.cpu()[:, 1:].long(), top.indices)
    torch.testing.assert_close(vals.cpu()[:, 1:], top.values)
    torch.testing.assert_close(vals.cpu()[:, 0], ref.gather(1, tok_cpu.long()[:, None])[:, 0])
    assert torch.equal(rank.cpu(), torch.ones(5, dtype=torch.int32))
    for a, b in zip(lp, lp_cpu):
        torch.testing.assert_close(a.cpu(), b)


@pytest.mark.parametrize("spec", [
    SamplingSpec(temperature=0.7, top_k=20),
    SamplingSpec(temperature=1.3, top_p=0.8),
    SamplingSpec(temperature=1.0, top_k=50, top_p=0.6),
    SamplingSpec(temperature=0.9, min_p=0.05),
    SamplingSpec(temperature=1.0, min_p=0.02, top_k=100, top_p=0.95),
])
def test_random_rows_keep_vllms_token_set(spec):
    """Every draw lies in the set vLLM's masks keep; over many positions the draws cover it in
    proportion to the renormalised probabilities; tpu and CPU draw the same tokens."""
    torch.manual_seed(1)
    logits = torch.randn(VOCAB) * 2
    masked = _reference_mask(logits, spec)
    positions = 64
    specs = [SamplingSpec(**{**spec.__dict__, "seed": 11}) for _ in range(positions)]
    variant = SamplerVariant.for_batch(specs, VOCAB, list(range(positions)))
    layout, buf = _pack(variant, specs, list(range(positions)))
    batch = logits.expand(positions, VOCAB).contiguous()
    tok_cpu, _ = _run("cpu", batch, layout, buf, variant)
    tok, _ = _run("tpu", batch, layout, buf, variant)
    assert torch.equal(tok.cpu(), tok_cpu)
    drawn = tok_cpu.long()
    assert not masked[drawn].any(), "a draw outside the kept set"
    probs = (logits / spec.temperature).masked_fill(masked, float("-inf")).softmax(-1)
    # The most likely kept token is drawn about as often as its probability says.
    top = probs.argmax()
    expected = probs[top].item() * positions
    assert abs((drawn == top).sum().item() - expected) < 4 * (expected + 1) ** 0.5


def test_seeded_rows_reproduce_and_unseeded_differ():
    logits = torch.zeros(6, VOCAB)  # uniform: every token equally likely
    specs = [SamplingSpec(temperature=1.0, seed=s) for s in (5, 5, 6, None, None, 5)]
    counts = [0, 0, 0, 0, 0, 1]
    variant = SamplerVariant.for_batch(specs, VOCAB, counts)
    layout, buf = _pack(variant, specs, counts)
    tok, _ = _run("tpu", logits, layout, buf, variant)
    t = tok.cpu().tolist()
    assert t[0] == t[1]  # same seed, same position
    assert len({t[0], t[2], t[5]}) == 3  # another seed, another position: independent draws
    assert t[3] != t[4]  # unseeded requests draw their own seeds


def test_mixed_greedy_and_random_rows():
    torch.manual_seed(2)
    logits = torch.randn(3, VOCAB)
    specs = [SamplingSpec(), SamplingSpec(temperature=1.0, top_p=0.5, seed=3), SamplingSpec(temperature=0.0)]
    variant = SamplerVariant.for_batch(specs, VOCAB, [0, 0, 0])
    layout, buf = _pack(variant, specs, [0, 0, 0], rows=4)
    tok, _ = _run("tpu", torch.cat([logits, torch.zeros(1, VOCAB)]), layout, buf, variant)
    t = tok.cpu()
    assert t[0] == logits[0].argmax() and t[2] == logits[2].argmax()


def test_edits_allowed_tokens_and_bitmask():
    torch.manual_seed(3)
    logits = torch.randn(3, VOCAB)
    best = logits.argmax(-1)
    specs = [
        SamplingSpec(logit_bias={7: 100.0}),
        SamplingSpec(min_tokens=2, stop_token_ids=(int(best[1]),)),
        SamplingSpec(allowed_token_ids=(10, 11, 12)),
    ]
    variant = SamplerVariant.for_batch(specs, VOCAB, [0, 0, 0], bitmask=True)
    assert variant.edits == 2 and variant.allowed == 3
    sections = variant.sections(3, VOCAB)
    layout = Layout(sections)
    buf, views = layout.host_buffer()
    fill_rows(views, variant, specs, [0, 0, 0], VOCAB)
    words = (VOCAB + 31) // 32
    views["bitmask"][:] = -1
    # Row 2's grammar forbids token 11 and 12: only 10 stays.
    views["bitmask"][2, 0] = np.int32(~((1 << 11) | (1 << 12)))
    assert views["bitmask"].shape == (3, words)
    tok, _ = _run("tpu", logits, layout, buf, variant)
    t = tok.cpu().tolist()
    second = logits[1].clone()
    second[best[1]] = float("-inf")
    assert t == [7, int(second.argmax()), 10]


def test_penalties_match_vllm_formula_and_track_state():
    torch.manual_seed(4)
    logits = torch.randn(2, VOCAB)
    specs = [SamplingSpec(repetition_penalty=1.5, frequency_penalty=0.3, presence_penalty=0.2),
             SamplingSpec(repetition_penalty=2.0)]
    variant = SamplerVariant.for_batch(specs, VOCAB, [0, 0])
    slots = torch.tensor([0, 3], dtype=torch.int32)
    prompt0, outs0 = [5, 6], [6, 9, 9]
    ptoks = [(0, t, 0) for t in prompt0] + [(0, t, 1) for t in outs0] + [(3, 1, 0)]
    layout, buf = _pack(variant, specs, [3, 0], penalty_tokens=ptoks)

    def reference():
        out = logits.clone()
        for r, (spec, prompt, outs) in enumerate([(specs[0], prompt0, outs0), (specs[1], [1], [])]):
            counts = torch.bincount(torch.tensor(outs, dtype=torch.long), minlength=VOCAB).float()
            seen = torch.zeros(VOCAB, dtype=torch.bool)
            seen[prompt] = True
            seen |= counts > 0
            pen = torch.where(seen, spec.repetition_penalty, 1.0)
            row = out[r] * torch.where(out[r] > 0, 1.0 / pen, pen)
            out[r] = row - spec.frequency_penalty * counts - spec.presence_penalty * (counts > 0).float()
        return out.argmax(-1)

    results = {}
    for device in ("cpu", "tpu"):
        state = PenaltyState.allocate(4, VOCAB, device)
        state.counts.fill_(7)  # stale state of a previous request: reset by "fresh"
        packed = torch.from_numpy(buf).to(device)
        v = layout.device_views(packed)
        s = slots.to(device)
        prepare_penalty_state(state, v, s, torch.ones(2, dtype=torch.int32, device=device))
        tok, _ = sample(logits.to(device), v, variant, state, s)
        record_sampled(state, s, tok, torch.tensor([1, 0], dtype=torch.int32, device=device))
        results[device] = (tok.cpu(), state.counts.cpu(), state.prompt_mask.cpu())
    assert torch.equal(results["tpu"][0], results["cpu"][0])
    assert torch.equal(results["cpu"][0].long(), reference())
    counts = results["tpu"][1]
    assert counts[0, 9] == 2 and counts[0, 6] == 1 + (results["tpu"][0][0] == 6)
    assert counts[3].sum() == 0  # row 1's sample was discarded (not real): not counted
    assert counts[1].eq(7).all()  # untouched slots keep their state
    assert results["tpu"][2][0, 5] and results["tpu"][2][3, 1]


def test_layout_offsets_and_float_bits():
    layout = Layout([Section("a", "i32", (2, 3)), Section("b", "f32", (4,)), Section("c", "i32", (0, 3))])
    buf, views = layout.host_buffer()
    views["a"][:] = np.arange(6).reshape(2, 3)
    views["b"][:] = [0.5, -1.25, float("inf"), 3.0]
    v = layout.device_views(torch.from_numpy(buf).to("tpu"))
    assert v["a"].cpu().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert v["b"].dtype == torch.float32 and v["b"].cpu().tolist() == [0.5, -1.25, float("inf"), 3.0]
    assert tuple(v["c"].shape) == (0, 3)
    with pytest.raises(ValueError, match="appears twice"):
        Layout([Section("a", "i32", (1,)), Section("a", "f32", (1,))])
