"""torch.tpu.ops on a single device, written from the original TorchTPU's documented signatures:
optimization_barrier, max pooling without indices and its backward, the jagged padding helpers
and splash_sdpa - each compared with the same math on CPU tensors."""

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from helpers import assert_close

ops = torch.tpu.ops


# ---- optimization_barrier

def test_barrier_passes_values_through():
    a, b = torch.randn(3, 4), torch.arange(6).reshape(2, 3)
    x, y = ops.optimization_barrier([a.to("tpu") * 2, b.to("tpu") + 1])
    assert_close(x, a * 2)
    assert_close(y, b + 1)
    assert ops.optimization_barrier([]) == []
    cpu = ops.optimization_barrier([a])
    assert torch.equal(cpu[0], a) and cpu[0] is not a
    with pytest.raises(TypeError, match="tensors"):
        ops.optimization_barrier([1.0])


def test_barrier_gradients_pass_through():
    w = torch.randn(5, 3, requires_grad=True)
    tw = w.detach().to("tpu").requires_grad_()
    (y,) = ops.optimization_barrier([tw.tanh()])
    (y * 3).sum().backward()
    (w.tanh() * 3).sum().backward()
    assert_close(tw.grad, w.grad)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_barrier_in_eager_modes_and_compile(mode, fresh_dynamo):
    x = torch.randn(4, 6)
    tx = x.to("tpu")
    with torch_tpu.execution_mode.mode(mode):
        (u, v) = ops.optimization_barrier([tx.exp(), tx * 2])
        out = u + v
    assert_close(out, x.exp() + x * 2)

    @torch.compile(backend="tpu")
    def f(t):
        (a,) = ops.optimization_barrier([t.cos()])
        return a * 2 + 1

    assert_close(f(tx), x.cos() * 2 + 1)


_BARRIER_SCRIPT = textwrap.dedent(r"""
    import glob, json, os, torch, torch_tpu
    x = torch.randn(4, 4).to("tpu")
    with torch_tpu.execution_mode.mode("fused"):
        a, b = torch.tpu.ops.optimization_barrier([x.sin(), x.cos()])
        (a * b).cpu()
    texts = [open(p).read() for p in glob.glob(os.path.join(os.environ["TORCH_TPU_DUMP_HLO"], "*.mlir"))]
    barrier = [t for t in texts if "stablehlo.optimization_barrier" in t]
    print("RESULT " + json.dumps({"programs": len(barrier),
                                  "fused_with_sin": any("stablehlo.sine" in t for t in barrier)}))
""")


def _run_dumping(script, tmp_path):
    """Runs `script` in a fresh process that dumps every program it compiles (an empty cache
    directory: everything compiles there); returns the JSON it prints after 'RESULT '."""
    (tmp_path / "dump").mkdir()
    env = dict(os.environ, TORCH_TPU_DUMP_HLO=str(tmp_path / "dump"), TORCH_TPU_CACHE_DIR=str(tmp_path / "c"))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][7:])


def test_barrier_is_a_stablehlo_optimization_barrier_in_the_graph(tmp_path):
    r = _run_dumping(_BARRIER_SCRIPT, tmp_path)
    assert r["programs"] >= 1 and r["fused_with_sin"]  # one Fused graph holds the ops and the barrier


# ---- max pooling without indices

POOL_CASES = [
    (1, (2, 3, 11), [3], [2], [1], [1], False),
    (1, (3, 9), [2], [1], [0], [2], True),
    (2, (2, 3, 9, 10), [3, 2], [2, 2], [1, 0], [1, 1], False),
    (2, (3, 8, 8), [2, 2], [2, 1], [0, 1], [2, 1], True),
    (3, (1, 2, 6, 7, 5), [2, 3, 2], [2, 2, 1], [1, 1, 0], [1, 1, 2], False),
]


@pytest.mark.parametrize("n, shape, k, s, p, d, ceil", POOL_CASES)
def test_max_pool_without_indices(n, shape, k, s, p, d, ceil):
    x = torch.randn(shape)
    fwd = getattr(ops, f"max_pool{n}d")
    bwd = getattr(ops, f"max_pool{n}d_backward")
    ref = getattr(F, f"max_pool{n}d")(x, k, s, p, d, ceil)
    out = fwd(x.to("tpu"), k, s, p, d, ceil)
    assert_close(out, ref)
    grad = torch.randn(ref.shape)
    xr = x.clone().requires_grad_()
    (ref_grad,) = torch.autograd.grad(getattr(F, f"max_pool{n}d")(xr, k, s, p, d, ceil), xr, grad)
    assert_close(bwd(grad.to("tpu"), x.to("tpu"), k, s, p, d, ceil), ref_grad)
    torch.testing.assert_close(bwd(grad, x, k, s, p, d, ceil), ref_grad)  # CPU tensors work too


def test_max_pool_checks_its_arguments():
    with pytest.raises(ValueError, match="kernel_size must have 2 entries"):
        ops.max_pool2d(torch.randn(1, 1, 4, 4, device="tpu"), [2], [2, 2], [0, 0], [1, 1], False)
    with pytest.raises(ValueError, match="3D or 4D"):
        ops.max_pool2d(torch.randn(4, 4, device="tpu"), [2, 2], [2, 2], [0, 0], [1, 1], False)


# ---- jagged helpers

def _jagged(lengths, dim, device):
    torch.manual_seed(0)
    parts = [torch.randn(n, dim) for n in lengths]
    return torch.nested.nested_tensor([p.to(device) for p in parts], layout=torch.jagged)


def test_align_and_strip_jagged():
    lengths, dim = [3, 5, 2], 4
    cpu, tpu = _jagged(lengths, dim, "cpu"), _jagged(lengths, dim, "tpu")
    padded_cpu = ops.align_jagged_to_multiple(cpu, 8, padding_value=-1.0)
    padded = ops.align_jagged_to_multiple(tpu, 8, padding_value=-1.0)
    assert padded.values().shape == (16, dim) == padded_cpu.values().shape
    assert_close(padded.values(), padded_cpu.values())
    assert_close(padded.offsets(), cpu.offsets())
    assert_close(padded.values()[10:], torch.full((6, dim), -1.0))
    assert ops.align_jagged_to_multiple(tpu, 5) is tpu  # already a multiple (10 rows)
    stripped = ops.strip_jagged_padding(padded)
    assert_close(stripped.values(), cpu.values())
    stripped_known = ops.strip_jagged_padding(padded, valid_tokens=10)
    assert_close(stripped_known.values(), cpu.values())
    for got, want in zip(stripped.unbind(), cpu.unbind()):
        assert_close(got, want)
    with pytest.raises(ValueError, match="valid_tokens"):
        ops.strip_jagged_padding(padded, valid_tokens=40)
    with pytest.raises(TypeError, match="jagged"):
        ops.align_jagged_to_multiple(torch.randn(3, 4, device="tpu"))


# ---- splash_sdpa

def _reference_attention(q, k, v, scale, mask):
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    logits = (q @ k.transpose(-1, -2)) * scale
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    return logits.softmax(-1) @ v


def _mask(kind, seq, window=None):
    i = torch.arange(seq).unsqueeze(1)
    j = torch.arange(seq).unsqueeze(0)
    if kind == "full":
        return None
    if kind == "causal":
        return j <= i
    return (j <= i) & (j >= i - window)


@pytest.mark.parametrize("kind, heads, kv_heads, window, scale", [
    ("causal", 4, 4, None, None),
    ("full", 2, 2, None, 0.3),
    ("window", 4, 4, 3, None),
    ("causal", 4, 2, None, None),
    ("window", 4, 1, 2, 0.5),
])
def test_splash_sdpa_matches_attention_on_cpu(kind, heads, kv_heads, window, scale):
    torch.manual_seed(0)
    seq, dim = 10, 8
    q = torch.randn(2, heads, seq, dim, requires_grad=True)
    k = torch.randn(2, kv_heads, seq, dim, requires_grad=True)
    v = torch.randn(2, kv_heads, seq, dim, requires_grad=True)
    ref = _reference_attention(q, k, v, scale, _mask(kind, seq, window))
    tq, tk, tv = (t.detach().to("tpu").requires_grad_() for t in (q, k, v))
    out = ops.splash_sdpa(tq, tk, tv, scale=scale, is_causal=kind != "full", local_window_size=window,
                          enable_gqa=heads != kv_heads, block_q=256)
    assert_close(out, ref.detach(), rtol=1e-4, atol=1e-5)
    grad = torch.randn(ref.shape)
    ref.backward(grad)
    out.backward(grad.to("tpu"))
    for got, want in ((tq, q), (tk, k), (tv, v)):
        assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)


def test_splash_sdpa_checks_its_arguments():
    q = torch.randn(1, 4, 6, 8, device="tpu")
    k = torch.randn(1, 2, 6, 8, device="tpu")
    with pytest.raises(ValueError, match="enable_gqa"):
        ops.splash_sdpa(q, k, k)
    with pytest.raises(ValueError, match="q_layout"):
        ops.splash_sdpa(q, q, q, q_layout="ROW")


# ---- ragged_dot (Mixture-of-Experts grouped products)

def _ragged_reference(lhs, rhs, sizes):
    outs, start = [], 0
    for i, count in enumerate(sizes):
        outs.append(lhs[start:start + count] @ rhs[i])
        start += count
    outs.append(lhs.new_zeros(lhs.shape[0] - start, rhs.shape[2]))
    return torch.cat(outs)


@pytest.mark.parametrize("sizes, m", [([10, 0, 20, 5], 37), ([1, 1, 1], 3), ([64], 64), ([3, 40, 0, 0, 7], 50)])
def test_ragged_dot_and_its_gradients_match_per_group_products(sizes, m):
    torch.manual_seed(0)
    k, n, g = 6, 5, len(sizes)
    lhs = torch.randn(m, k, requires_grad=True)
    rhs = torch.randn(g, k, n, requires_grad=True)
    ref = _ragged_reference(lhs, rhs, sizes)
    grad = torch.randn_like(ref)
    ref.backward(grad)
    group_sizes = torch.tensor(sizes, device="tpu")
    tl, tr = lhs.detach().to("tpu").requires_grad_(), rhs.detach().to("tpu").requires_grad_()
    out = ops.ragged_dot(tl, tr, group_sizes)
    assert_close(out, ref.detach(), rtol=1e-5, atol=1e-5)
    out.backward(grad.to("tpu"))
    assert_close(tl.grad, lhs.grad, rtol=1e-5, atol=1e-5)
    assert_close(tr.grad, rhs.grad, rtol=1e-5, atol=1e-5)
    assert_close(ops.ragged_dot_weight_grad(tl.detach(), grad.to("tpu"), group_sizes), rhs.grad, rtol=1e-5, atol=1e-5)
    written = torch.empty(m, n, device="tpu")
    assert ops.ragged_dot(tl.detach(), tr.detach(), group_sizes, out=written) is written
    assert_close(written, ref.detach(), rtol=1e-5, atol=1e-5)


def test_ragged_dot_is_one_program_for_every_split():
    """The tile layout comes from group_sizes on the device: new splits reuse the program."""
    torch.manual_seed(0)
    lhs, rhs = torch.randn(48, 8, device="tpu"), torch.randn(3, 8, 4, device="tpu")
    splits = ([16, 16, 16], [40, 0, 8], [1, 2, 45])
    with torch_tpu.execution_mode.mode("fused"):
        ops.ragged_dot(lhs, rhs, torch.tensor(splits[0], device="tpu")).cpu()
        before = torch.tpu.compilation_cache_stats()["compiles"]
        for s in splits[1:]:
            out = ops.ragged_dot(lhs, rhs, torch.tensor(s, device="tpu"))
            assert_close(out, _ragged_reference(lhs.cpu(), rhs.cpu(), s), rtol=1e-5, atol=1e-5)
        assert torch.tpu.compilation_cache_stats()["compiles"] == before


_RAGGED_SCRIPT = textwrap.dedent(r"""
    import glob, json, os, re, torch, torch_tpu
    m, g, k, n = 1000, 8, 16, 24
    lhs, rhs = torch.randn(m, k).to("tpu"), torch.randn(g, k, n).to("tpu")
    sizes = torch.tensor([500, 3, 0, 250, 100, 100, 40, 7]).to("tpu")
    torch.tpu.ops.ragged_dot(lhs, rhs, sizes).cpu()
    shapes = []
    for path in glob.glob(os.path.join(os.environ["TORCH_TPU_DUMP_HLO"], "*.mlir")):
        for line in open(path):
            hit = re.search(r"stablehlo.dot_general.*: \(tensor<(\d+)x(\d+)x16xf32>", line)
            if hit:
                shapes.append([int(hit.group(1)), int(hit.group(2))])
    print("RESULT " + json.dumps(shapes))
""")


def test_ragged_dot_work_is_the_ragged_products(tmp_path):
    """The program's one dot multiplies tiles covering each group's rows (at most one padded tile
    per group), not g dense products."""
    shapes = _run_dumping(_RAGGED_SCRIPT, tmp_path)
    assert len(shapes) == 1, shapes
    tiles, tile = shapes[0]
    m, g = 1000, 8
    assert tiles * tile <= m + (g + 1) * tile  # rows multiplied: the ragged rows plus padding
    assert tiles * tile < 2 * m < g * m


def test_ragged_dot_checks_its_arguments():
    lhs, rhs = torch.randn(4, 3, device="tpu"), torch.randn(2, 3, 5, device="tpu")
    with pytest.raises(ValueError, match="do not fit"):
        ops.ragged_dot(lhs, rhs, torch.tensor([1, 1, 2], device="tpu"))
    with pytest.raises(TypeError, match="integer"):
        ops.ragged_dot(lhs, rhs, torch.tensor([1.0, 3.0], device="tpu"))
    with pytest.raises(ValueError, match="no host read"):
        ops.ragged_dot(lhs, rhs, torch.tensor([1, 3]))
