"""F.scaled_dot_product_attention as one program per call (csrc/aten/attention_ops.cc,
csrc/lowering/attention.cc): forward and backward against the CPU (causal, bool and float
masks, grouped-query heads, scale, 3-D inputs, bfloat16), dropout (keep rate, and gradients
equal to the math formula's with the same mask), strict no-fallback, one program per call,
math fallback for uncovered calls, bad input, and torch.compile(backend="tpu")."""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_tpu
from helpers import assert_close

FUSED_GRAD_FN = "ScaledDotProductFusedAttentionOverrideableBackward0"

# (name, q shape, kv shape, kwargs, mask shape or None, mask kind)
CASES = [
    ("plain", (2, 4, 8, 16), (2, 4, 8, 16), {}, None, None),
    ("causal", (2, 4, 8, 16), (2, 4, 8, 16), {"is_causal": True}, None, None),
    ("causal_rect", (1, 2, 5, 8), (1, 2, 9, 8), {"is_causal": True}, None, None),
    ("bool_mask_2d", (2, 4, 8, 16), (2, 4, 6, 16), {}, (8, 6), "bool"),
    ("bool_mask_4d", (2, 4, 8, 16), (2, 4, 6, 16), {}, (2, 1, 8, 6), "bool"),
    ("float_mask", (2, 4, 8, 16), (2, 4, 6, 16), {}, (1, 4, 8, 6), "float"),
    ("gqa", (2, 8, 8, 16), (2, 2, 8, 16), {"enable_gqa": True, "is_causal": True}, None, None),
    ("gqa_mask", (2, 6, 8, 16), (2, 3, 8, 16), {"enable_gqa": True}, (8, 8), "float"),
    ("scale", (2, 4, 8, 16), (2, 4, 8, 16), {"scale": 0.3}, None, None),
    ("negative_scale", (2, 4, 8, 16), (2, 4, 8, 16), {"scale": -0.2, "is_causal": True}, None, None),
    ("three_d", (4, 8, 16), (4, 8, 16), {}, (8, 8), "float"),
]


def make_inputs(q_shape, kv_shape, mask_shape, mask_kind, dtype, seed=0, v_dim=None):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(q_shape, generator=g).to(dtype)
    k = torch.randn(kv_shape, generator=g).to(dtype)
    v_shape = kv_shape if v_dim is None else (*kv_shape[:-1], v_dim)
    v = torch.randn(v_shape, generator=g).to(dtype)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(mask_shape, generator=g) > 0.3
    elif mask_kind == "float":
        mask = torch.randn(mask_shape, generator=g).to(dtype)
    return q, k, v, mask


def run_sdpa(q, k, v, mask, kwargs, grad_out, mask_grad=False):
    """Output and gradients (q, k, v and a float mask's) of one SDPA call on the tensors' device."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    m = None
    if mask is not None:
        m = mask.detach().clone()
        if mask_grad:
            m.requires_grad_()
    out = F.scaled_dot_product_attention(*leaves, attn_mask=m, **kwargs)
    wrt = leaves + ([m] if mask_grad else [])
    grads = torch.autograd.grad(out, wrt, grad_out)
    return out, grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forward_backward_match_cpu(case, dtype, no_fallback):
    name, q_shape, kv_shape, kwargs, mask_shape, mask_kind = case
    q, k, v, mask = make_inputs(q_shape, kv_shape, mask_shape, mask_kind, dtype)
    mask_grad = mask_kind == "float"
    grad_out = torch.randn(q_shape, generator=torch.Generator().manual_seed(7)).to(dtype)
    # The CPU's flash kernel gives nan for a negative causal scale: compare with its math path.
    with sdpa_kernel([SDPBackend.MATH]) if name == "negative_scale" else contextlib.nullcontext():
        out_cpu, grads_cpu = run_sdpa(q, k, v, mask, kwargs, grad_out, mask_grad)
    to = lambda t: None if t is None else t.to("tpu")  # noqa: E731
    out, grads = run_sdpa(to(q), to(k), to(v), to(mask), kwargs, to(grad_out), mask_grad)
    assert out.grad_fn.name() == FUSED_GRAD_FN
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    assert_close(out, out_cpu, **tol)
    for got, want in zip(grads, grads_cpu):
        assert_close(got, want, **tol)


def test_value_head_size_and_transposed_layout(no_fallback):
    """Ev != E, and q/k/v as transposed views (the usual [B, L, H, D] projection): results and
    gradients keep the inputs' memory layout, as PyTorch's meta kernels say."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 8, 4, 16, generator=g).transpose(1, 2)
    k = torch.randn(2, 6, 4, 16, generator=g).transpose(1, 2)
    v = torch.randn(2, 6, 4, 12, generator=g).transpose(1, 2)
    grad_out = torch.randn(2, 4, 8, 12, generator=g)
    out_cpu, grads_cpu = run_sdpa(q, k, v, None, {}, grad_out)
    qt, kt, vt = (t.to("tpu") for t in (q, k, v))
    assert not qt.is_contiguous()
    out, grads = run_sdpa(qt, kt, vt, None, {}, grad_out.to("tpu"))
    assert_close(out, out_cpu)
    assert out.transpose(1, 2).is_contiguous()  # laid out like q
    for got, want, inp in zip(grads, grads_cpu, (qt, kt, vt)):
        assert_close(got, want)
        assert got.stride() == inp.stride()


def test_fully_masked_rows_give_zeros_like_the_math_path(no_fallback):
    q, k, v, _ = make_inputs((1, 2, 4, 8), (1, 2, 5, 8), None, None, torch.float32)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1] = False  # query 1 sees no key
    grad_out = torch.randn(1, 2, 4, 8)
    with sdpa_kernel([SDPBackend.MATH]):
        out_cpu, grads_cpu = run_sdpa(q, k, v, mask, {}, grad_out)
    out, grads = run_sdpa(q.to("tpu"), k.to("tpu"), v.to("tpu"), mask.to("tpu"), {}, grad_out.to("tpu"))
    assert out.grad_fn.name() == FUSED_GRAD_FN
    assert_close(out, out_cpu)
    assert torch.all(out[:, :, 1].cpu() == 0)
    for got, want in zip(grads, grads_cpu):
        assert_close(got, want)


@pytest.mark.parametrize("gqa", [False, True], ids=["mha", "gqa"])
def test_backward_takes_row_sums_from_the_forward_output_like_cpu_flash(gqa, no_fallback):
    """The softmax backward's row sums come from the forward's output, sum(dO * O) over the head
    dim, as PyTorch's CPU flash-attention backward takes them (no sum over the keys of the dP
    product): given the same `out`, even one that is not the forward's, both give the same
    gradients, and dV does not depend on it."""
    g = torch.Generator().manual_seed(5)
    hk = 2 if gqa else 4
    q = torch.randn(2, 4, 8, 16, generator=g)
    k, v = (torch.randn(2, hk, 8, 16, generator=g) for _ in range(2))
    grad_out = torch.randn(2, 4, 8, 16, generator=g)
    # The CPU kernel takes key-value heads repeated to the query's.
    k_cpu, v_cpu = (t.repeat_interleave(4 // hk, dim=1) for t in (k, v))
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k_cpu, v_cpu, 0.0, True)[:2]
    other_out = out * 1.5 + 0.1
    want = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, q, k_cpu, v_cpu, other_out, lse, 0.0, True)
    want = (want[0], *(w.unflatten(1, (hk, 4 // hk)).sum(2) for w in want[1:]))  # back to kv heads
    t = lambda x: x.to("tpu")  # noqa: E731
    fwd = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(t(q), t(k), t(v), None, 0.0, True)
    assert_close(fwd[0], out)
    grads = {}
    for name, given in (("forward's", fwd[0]), ("other", t(other_out))):
        grads[name] = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
            t(grad_out), t(q), t(k), t(v), None, [True, True, True, False], given, fwd[1], None, None, 8, 8,
            0.0, True, fwd[6], fwd[7])[:3]
    for got, ref in zip(grads["other"], want):
        assert_close(got, ref)
    assert (grads["other"][0] - grads["forward's"][0]).abs().max().item() > 0.1  # dQ follows `out`
    assert_close(grads["other"][2], grads["forward's"][2].cpu())  # dV does not

def test_strict_mode_has_no_fallback_and_one_program_per_direction():
    q, k, v, mask = make_inputs((2, 4, 8, 16), (2, 2, 8, 16), (8, 8), "float", torch.float32)
    qt, kt, vt, mt = (t.to("tpu") for t in (q, k, v, mask))
    qt.requires_grad_()
    kt.requires_grad_()
    vt.requires_grad_()
    grad_out = torch.randn(2, 4, 8, 16).to("tpu")
    torch_tpu.reset_fallback_counts()
    torch_tpu.set_fallback_mode("error")
    try:
        for _ in range(2):  # the second round runs from the cache
            torch.tpu.synchronize()
            before = torch.tpu.compilation_cache_stats()["executions"]
            out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mt, enable_gqa=True)
            torch.tpu.synchronize()
            forward = torch.tpu.compilation_cache_stats()["executions"] - before
            grads = torch.autograd.grad(out, (qt, kt, vt), grad_out)
            torch.tpu.synchronize()
            backward = torch.tpu.compilation_cache_stats()["executions"] - before - forward
            assert (forward, backward) == (1, 1)
    finally:
        torch_tpu.set_fallback_mode("warn")
    assert torch_tpu.fallback_counts() == {}
    _, grads_cpu = run_sdpa(q, k, v, mask, {"enable_gqa": True}, grad_out.cpu())
    for got, want in zip(grads, grads_cpu):
        assert_close(got, want)


def test_math_choice_for_calls_the_program_does_not_cover(no_fallback):
    """5-D inputs and key/value batch broadcasting take PyTorch's decomposition, still right;
    sdpa_kernel(MATH) forces it, and the two paths agree."""
    g = torch.Generator().manual_seed(5)
    q5 = torch.randn(2, 2, 3, 4, 8, generator=g)
    out = F.scaled_dot_product_attention(q5.to("tpu"), q5.to("tpu"), q5.to("tpu"))
    assert_close(out, F.scaled_dot_product_attention(q5, q5, q5))
    q, k = torch.randn(2, 2, 4, 8, generator=g), torch.randn(1, 2, 4, 8, generator=g)
    out = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), k.to("tpu"))
    assert_close(out, F.scaled_dot_product_attention(q, k, k))
    qt = q.to("tpu").requires_grad_()
    with sdpa_kernel([SDPBackend.MATH]):
        math = F.scaled_dot_product_attention(qt, qt, qt, is_causal=True)
    assert math.grad_fn.name() != FUSED_GRAD_FN
    fused = F.scaled_dot_product_attention(qt, qt, qt, is_causal=True)
    assert fused.grad_fn.name() == FUSED_GRAD_FN
    assert_close(fused, math.detach().cpu())


def test_bad_input_raises_clear_errors():
    q = torch.randn(2, 4, 8, 16, device="tpu")
    k = torch.randn(2, 3, 8, 16, device="tpu")
    with pytest.raises(RuntimeError, match="multiple of the key/value heads"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, k)
    with pytest.raises(RuntimeError, match="dropout_p must be in"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, q, q, dropout_p=1.5)
    with pytest.raises(RuntimeError, match="does not broadcast"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, q, q, torch.zeros(3, 8, device="tpu"))
    with pytest.raises(RuntimeError):  # PyTorch's own check: heads differ without enable_gqa
        F.scaled_dot_product_attention(q, k, k)


# ---- dropout


def test_dropout_keep_rate_and_scaling(no_fallback):
    """With V = identity the output is the dropped, rescaled probability matrix itself."""
    p, length = 0.3, 64
    q = torch.randn(2, 4, length, 16, device="tpu")
    k = torch.randn(2, 4, length, 16, device="tpu")
    eye = torch.eye(length, device="tpu").expand(2, 4, length, length)
    torch.tpu.manual_seed(0)
    dropped = F.scaled_dot_product_attention(q, k, eye, dropout_p=p).cpu()
    probs = F.scaled_dot_product_attention(q, k, eye).cpu()
    kept = dropped != 0
    keep_rate = kept.float().mean().item()
    n = kept.numel()
    assert abs(keep_rate - (1 - p)) < 5 * (p * (1 - p) / n) ** 0.5, keep_rate
    torch.testing.assert_close(dropped[kept], probs[kept] / (1 - p))
    # A new draw gives a new mask; the same seed gives the same one.
    again = F.scaled_dot_product_attention(q, k, eye, dropout_p=p).cpu()
    assert not torch.equal(again != 0, kept)
    torch.tpu.manual_seed(0)
    assert torch.equal(F.scaled_dot_product_attention(q, k, eye, dropout_p=p).cpu(), dropped)


@pytest.mark.parametrize("gqa", [False, True], ids=["mha", "gqa"])
def test_dropout_gradients_match_math_formula_with_the_same_mask(gqa, no_fallback):
    """The backward regenerates the forward's mask: read the mask with V = identity under one
    seed, rerun forward + backward under the same seed, and compare with PyTorch's math formula
    on the CPU given that mask."""
    p, length, hq = 0.25, 12, 4
    hk = 2 if gqa else hq
    q, k, v, _ = make_inputs((2, hq, length, 8), (2, hk, length, 8), None, None, torch.float32, seed=11)
    grad_out = torch.randn(2, hq, length, 8)
    kwargs = {"dropout_p": p, "is_causal": True, "enable_gqa": gqa}
    qt, kt = q.to("tpu"), k.to("tpu")
    eye = torch.eye(length, device="tpu").expand(2, hk, length, length)
    torch.tpu.manual_seed(123)
    mask = F.scaled_dot_product_attention(qt, kt, eye, **kwargs).cpu() != 0
    # Causally hidden weights are 0 with or without dropout: count them as kept.
    mask |= ~torch.ones(length, length, dtype=torch.bool).tril()
    torch.tpu.manual_seed(123)
    out, grads = run_sdpa(qt, kt, v.to("tpu"), None, kwargs, grad_out.to("tpu"))
    assert out.grad_fn.name() == FUSED_GRAD_FN

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    rep = hq // hk
    kk, vv = (t.repeat_interleave(rep, dim=1) for t in leaves[1:])
    ref, _ = torch.ops.aten._scaled_dot_product_attention_math(
        leaves[0], kk, vv, dropout_p=p, is_causal=True, dropout_mask=mask
    )
    ref_grads = torch.autograd.grad(ref, leaves, grad_out)
    assert_close(out, ref.detach(), rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, ref_grads):
        assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_dropout_zero_is_exact_vs_cpu(no_fallback):
    q, k, v, _ = make_inputs((2, 4, 8, 16), (2, 4, 8, 16), None, None, torch.float32)
    out = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), dropout_p=0.0)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, dropout_p=0.0))


# ---- torch.compile


@pytest.mark.usefixtures("fresh_dynamo")
def test_compiled_attention_keeps_the_fused_op_and_matches_cpu(no_fallback):
    from torch_tpu.dynamo import graph_runner

    seen = []

    def attention(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).sum(-1)

    def spy(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    q, k, v, mask = make_inputs((2, 4, 8, 16), (2, 2, 8, 16), (8, 8), "float", torch.float32)
    compiled = torch.compile(attention, backend="tpu")
    leaves = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    for _ in range(3):
        out = compiled(*leaves, mask.to("tpu"))
        grads = torch.autograd.grad(out.sum(), leaves)
    cpu_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = attention(*cpu_leaves, mask)
    ref_grads = torch.autograd.grad(ref.sum(), cpu_leaves)
    assert_close(out, ref.detach())
    for got, want in zip(grads, ref_grads):
        assert_close(got, want)
    # Without dropout the graphs draw no random numbers: captured once, then replayed.
    assert graph_runner.stats["rerecorded_calls"] == 0, graph_runner.stats
    assert graph_runner.stats["replays"] >= 4, graph_runner.stats
    # What AOTAutograd hands the backend: the fused ops, not the math decomposition.
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()
    spying = aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(spy(gm, _)),
                          bw_compiler=lambda gm, _: make_boxed_func(spy(gm, _)))
    out = torch.compile(attention, backend=spying)(*leaves, mask.to("tpu"))
    torch.autograd.grad(out.sum(), leaves)
    assert "aten._scaled_dot_product_fused_attention_overrideable.default" in seen
    assert "aten._scaled_dot_product_fused_attention_overrideable_backward.default" in seen
    assert not any("softmax" in s for s in seen), seen
