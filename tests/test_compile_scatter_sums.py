"""Sums of select/slice backwards written as one concatenation (torch_tpu/dynamo/scatter_sums.py):
which sums the pass rewrites and which it leaves, that a rewritten graph computes what the
original computes (on the CPU, and inside compiled programs on tpu), and that the backward of a
packed query/key/value split is compiled without them."""

import pytest
import torch
import torch._dynamo
from torch.fx.experimental.proxy_tensor import make_fx

import torch_tpu  # noqa: F401
from torch_tpu.dynamo import backend, graph_runner
from torch_tpu.dynamo.scatter_sums import fold_scatter_sums

aten = torch.ops.aten
SCATTERS = (aten.select_backward.default, aten.slice_backward.default)


def _count(gm, targets):
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target in targets)


def _qkv(a, b, c):  # three [4, 5] gradients into a [3, 4, 5] tensor, as qkv[0], qkv[1], qkv[2]'s backward
    return (aten.select_backward(a, [3, 4, 5], 0, 0) + aten.select_backward(b, [3, 4, 5], 0, 1)
            + aten.select_backward(c, [3, 4, 5], 0, 2))


def _halves(a, b):  # two [4, 3] gradients into a [4, 6] tensor, as a rotary embedding's halves
    return aten.slice_backward(b, [4, 6], -1, 3, 9223372036854775807, 1) + aten.slice_backward(a, [4, 6], 1, 0, 3, 1)


def _gaps(a, b):  # parts 1 and 3 of 5 along dim 1, negative index: zeros elsewhere
    return aten.select_backward(a, [4, 5], 1, 1) + aten.select_backward(b, [4, 5], 1, -2)


def _scaled(a, b, c):  # a sum feeding a further op, reached through a chain of adds
    s = aten.slice_backward(a, [6, 4], 0, 0, 2, 1) + aten.slice_backward(b, [6, 4], 0, 2, 4, 1)
    return (s + aten.slice_backward(c, [6, 4], 0, 4, 6, 1)) * 2


def _dense_and_parts(a, b, d):  # a gradient flowing around the parts too: d + concatenation
    return (aten.slice_backward(a, [4, 6], 1, 0, 3, 1) + d) + aten.slice_backward(b, [4, 6], 1, 3, 6, 1)


def _two_dense(a, b, d):  # two other terms: regrouping them would change the rounding
    return aten.slice_backward(a, [4, 6], 1, 0, 3, 1) + d + aten.slice_backward(b, [4, 6], 1, 3, 6, 1) + d * 3


def _overlap(a, b):  # overlapping parts add up: not a concatenation
    return aten.slice_backward(a, [4, 6], 1, 0, 4, 1) + aten.slice_backward(b, [4, 6], 1, 2, 6, 1)


def _other_dims(a, b):
    return aten.select_backward(a, [4, 4], 0, 0) + aten.select_backward(b, [4, 4], 1, 1)


def _strided(a, b):  # a slice with a step is not a contiguous part
    return aten.slice_backward(a, [4, 6], 1, 0, 6, 2) + aten.slice_backward(b, [4, 6], 1, 1, 6, 2)


def _partial_use(a, b, c):  # the inner sum is used on its own too: the outer add is not a pure tree
    s = aten.select_backward(a, [3, 4], 0, 0) + aten.select_backward(b, [3, 4], 0, 1)
    return s + aten.select_backward(c, [3, 4], 0, 2), s


CASES = {
    "qkv": (_qkv, [(4, 5)] * 3, 1),
    "halves": (_halves, [(4, 3)] * 2, 1),
    "gaps": (_gaps, [(4,)] * 2, 1),
    "chain": (_scaled, [(2, 4)] * 3, 1),
    "dense_and_parts": (_dense_and_parts, [(4, 3), (4, 3), (4, 6)], 1),
    "two_dense": (_two_dense, [(4, 3), (4, 3), (4, 6)], 0),
    "overlap": (_overlap, [(4, 4)] * 2, 0),
    "other_dims": (_other_dims, [(4,)] * 2, 0),
    "strided": (_strided, [(4, 3), (4, 3)], 0),
    "partial_use": (_partial_use, [(4,)] * 3, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_which_sums_are_folded_and_the_values_stay(case):
    fn, shapes, folds = CASES[case]
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(s, generator=gen) for s in shapes]
    gm = make_fx(fn, tracing_mode="fake")(*args)
    scatters = _count(gm, SCATTERS)
    assert fold_scatter_sums(gm) == folds
    if folds:
        assert _count(gm, (aten.cat.default,)) == folds
        assert _count(gm, SCATTERS) < scatters  # the folded ones are gone from the graph
    else:
        assert _count(gm, SCATTERS) == scatters
    expected, got = fn(*args), gm(*args)
    for e, g in zip(expected if isinstance(expected, tuple) else [expected], got if isinstance(got, tuple) else [got]):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_mixed_dtypes_are_left_alone():
    a, b = torch.randn(4), torch.randn(4, dtype=torch.float64)
    gm = make_fx(lambda a, b: aten.select_backward(a, [2, 4], 0, 0) + aten.select_backward(b, [2, 4], 0, 1),
                 tracing_mode="fake")(a, b)
    assert fold_scatter_sums(gm) == 0


class _PackedAttention(torch.nn.Module):
    """One projection for queries, keys and values, taken apart by indexing (as
    nn.MultiheadAttention does), and a rotary-style swap of the queries' halves taken by slicing."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        half = q.shape[-1] // 2
        q1, q2 = q[..., :half], q[..., half:]
        q = torch.cat([-q2, q1], dim=-1) + q
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


@pytest.mark.usefixtures("fresh_dynamo")
def test_the_compiled_backward_of_a_packed_projection_concatenates_and_equals_the_cpu(monkeypatch):
    graphs = {}
    init = graph_runner.CompiledFxGraph.__init__

    def recording_init(self, gm, kind):
        graphs[kind] = _count(gm, SCATTERS), _count(gm, (aten.cat.default,))
        init(self, gm, kind)

    monkeypatch.setattr(graph_runner.CompiledFxGraph, "__init__", recording_init)
    folds = []
    monkeypatch.setattr(backend, "fold_scatter_sums", lambda gm: folds.append(fold_scatter_sums(gm)) or folds[-1])
    torch.manual_seed(0)
    cpu = _PackedAttention()
    dev = _PackedAttention().to("tpu")
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(2, 8, 16)
    step = torch.compile(lambda m, x: m(x).square().mean(), backend="tpu")
    for _ in range(2):  # capture, then replay
        dev.zero_grad()
        loss = step(dev, x.to("tpu"))
        loss.backward()
    cpu(x).square().mean().backward()
    torch.testing.assert_close(loss.cpu(), cpu(x).square().mean(), rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=name)
    # the three selects' backwards and the two slices', each one concatenation
    assert sum(folds) >= 2, folds
    assert graphs["backward"][0] == 0, graphs
    assert graph_runner.stats["replays"] >= 2
