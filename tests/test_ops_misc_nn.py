"""Less common NN ops on the device - reflect/replicate/circular padding, GLU, PReLU, fold and
unfold, adaptive max pooling, multi-margin losses, pdist, renorm, mode, frexp, nonzero_static,
channel_shuffle, repeat_interleave, normal with tensor parameters - forward and backward, each
compared with the CPU."""

import pytest
import torch
import torch.nn.functional as F

from helpers import assert_close, run_both


@pytest.fixture(autouse=True)
def _no_fallback(no_fallback):
    yield


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(shape, generator=g).to(dtype)


def grads_both(fn, *inputs):
    """(tpu grads, cpu grads) of fn(*inputs).sum() with respect to every floating input."""
    results = []
    for device in ("tpu", "cpu"):
        leaves = [t.detach().to(device).requires_grad_(t.is_floating_point()) for t in inputs]
        out = fn(*leaves)
        out = out[0] if isinstance(out, tuple) else out
        (out * torch.linspace(0.5, 1.5, out.numel(), device=device).reshape(out.shape)).sum().backward()
        results.append([t.grad for t in leaves if t.is_floating_point()])
    return results


def check_with_grad(fn, *inputs, rtol=1e-5, atol=1e-5):
    assert_close(*run_both(fn, *inputs), rtol=rtol, atol=atol)
    tpu_grads, cpu_grads = grads_both(fn, *inputs)
    for g_tpu, g_cpu in zip(tpu_grads, cpu_grads):
        assert_close(g_tpu, g_cpu, rtol=rtol, atol=atol)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 7), (2, 3)), ((2, 3, 5, 6), (1, 2, 3, 0)),
                                       ((1, 2, 4, 5, 6), (1, 1, 2, 0, 3, 2)), ((3, 6, 5), (-1, 2))])
def test_padding_modes(mode, shape, pad):
    check_with_grad(lambda x: F.pad(x, pad, mode=mode), rand(*shape))


def test_reflect_padding_too_large_raises_clear_error():
    with pytest.raises(RuntimeError, match="(?i)padding size should be less than"):
        F.pad(torch.ones(1, 2, 3, device="tpu"), (3, 3), mode="reflect")


def test_glu_and_prelu():
    check_with_grad(lambda x: F.glu(x, dim=1), rand(3, 8, 5))
    check_with_grad(lambda x: F.glu(x, dim=-1), rand(4, 6))
    check_with_grad(F.prelu, rand(2, 4, 5, 5), torch.tensor([0.1, 0.25, -0.3, 0.5]))
    check_with_grad(F.prelu, rand(6, 3), torch.tensor([0.2]))


def test_unfold_and_fold():
    x = rand(2, 3, 9, 8)
    check_with_grad(lambda t: F.unfold(t, kernel_size=(3, 2), dilation=(1, 2), padding=1, stride=(2, 1)), x)
    cols = rand(2, 3 * 2 * 2, 9)
    check_with_grad(lambda t: F.fold(t, output_size=(5, 6), kernel_size=2, stride=(2, 2), padding=(1, 0)), cols)


@pytest.mark.parametrize("output_size", [(3, 4), (1, 1), (5, 7)])
def test_adaptive_max_pool2d(output_size):
    x = rand(2, 3, 10, 9)
    got, want = run_both(lambda t: F.adaptive_max_pool2d(t, output_size, return_indices=True), x)
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])
    check_with_grad(lambda t: F.adaptive_max_pool2d(t, output_size), x)


def test_adaptive_max_pool1d_and_3d():
    check_with_grad(lambda t: F.adaptive_max_pool1d(t, 4), rand(2, 3, 11))
    check_with_grad(lambda t: F.adaptive_max_pool3d(t, (2, 3, 2)), rand(1, 2, 5, 6, 4))


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multi_margin_loss(p, reduction):
    x, target = rand(5, 7), torch.tensor([0, 6, 3, 3, 1])
    weight = torch.linspace(0.5, 2.0, 7)
    check_with_grad(lambda t: F.multi_margin_loss(t, target.to(t.device), p=p, margin=0.7, reduction=reduction), x)
    check_with_grad(lambda t: F.multi_margin_loss(t, target.to(t.device), p=p, weight=weight.to(t.device),
                                                  reduction=reduction), x)


def test_multi_margin_loss_of_a_scalar_input():
    # a 0-dim input is one sample with one class (this once crashed the lowering)
    check_with_grad(lambda t: F.multi_margin_loss(t, torch.tensor(0, device=t.device)), torch.tensor(0.7))
    check_with_grad(lambda t: F.multi_margin_loss(t, torch.tensor([0], device=t.device), reduction="none"),
                    torch.tensor([0.3]))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(reduction):
    x = rand(4, 5)
    target = torch.tensor([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 0, 0, 0, 0], [4, 4, -1, 0, 0]])
    check_with_grad(lambda t: F.multilabel_margin_loss(t, target.to(t.device), reduction=reduction), x)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.5, float("inf")])
def test_pdist(p):
    assert_close(*run_both(lambda t: F.pdist(t, p=p), rand(6, 4)), rtol=1e-5, atol=1e-5)


def test_renorm_mode_frexp_trace():
    assert_close(*run_both(lambda t: torch.renorm(t, 2, 1, 1.5), rand(3, 5, 2)))
    assert_close(*run_both(lambda t: torch.renorm(t, float("inf"), 0, 0.8), rand(4, 3)))
    x = torch.tensor([[1, 3, 3, 2, 1, 1], [5, 5, 4, 4, 0, 4], [7, 7, 7, 7, 7, 7]])
    for dim, keepdim in [(1, False), (0, True), (-1, True)]:
        got, want = run_both(lambda t: torch.mode(t, dim, keepdim), x)
        assert_close(got.values, want.values)
        assert_close(got.indices, want.indices)
    # (no subnormals: XLA's CPU backend flushes them to zero)
    y = torch.cat([rand(20) * 1000, torch.tensor([0.0, -0.0, 1.0, 0.5, 2.0 ** -120, float("inf"), float("nan")])])
    got, want = run_both(torch.frexp, y)
    assert_close(got.mantissa, want.mantissa)
    assert_close(got.exponent, want.exponent)
    assert_close(*run_both(torch.trace, rand(4, 6)))


def test_nonzero_static_pads_and_truncates():
    x = torch.tensor([[0, 1, 0], [2, 0, 3]])
    for size, fill in [(5, -1), (2, 0), (0, 7)]:
        assert_close(*run_both(lambda t: torch.nonzero_static(t, size=size, fill_value=fill), x))


def test_channel_shuffle_and_repeat_interleave():
    assert_close(*run_both(lambda t: F.channel_shuffle(t, 3), rand(2, 6, 2, 2)))
    repeats = torch.tensor([2, 0, 3, 1])
    assert_close(*run_both(torch.repeat_interleave, repeats))
    assert_close(*run_both(lambda r: torch.repeat_interleave(r, output_size=6), repeats))
    assert_close(*run_both(lambda t, r: torch.repeat_interleave(t, r, dim=0), rand(4, 3), repeats))


def test_normal_with_tensor_parameters():
    torch.tpu.manual_seed(3)
    mean = torch.linspace(-5, 5, 4000, device="tpu").reshape(2, 2000)
    std = torch.full((2000,), 0.5, device="tpu")
    sample = torch.normal(mean, std)
    assert sample.shape == (2, 2000) and sample.device.type == "tpu"
    z = (sample - mean) / std
    assert abs(z.mean().item()) < 0.1 and abs(z.std().item() - 1) < 0.1
    z2 = (torch.normal(mean, 2.0) - mean) / 2.0
    assert abs(z2.std().item() - 1) < 0.1
    z3 = torch.normal(1.0, std.expand(2, 2000)) - 1.0
    assert abs(z3.std().item() - 0.5) < 0.05
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        torch.normal(mean, -std)


@pytest.mark.parametrize("pool, shape", [(F.avg_pool1d, (0, 3, 9)), (F.avg_pool2d, (0, 2, 6, 6)),
                                         (F.avg_pool3d, (0, 1, 4, 4, 4))])
def test_avg_pool_backward_of_an_empty_batch(pool, shape):
    # An empty batch has no pooling planes: the gradient is empty (this once divided by zero
    # while building the program and killed the process).
    x = torch.randn(shape, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    pool(x, 3).sum().backward()
    pool(xt, 3).sum().backward()
    assert_close(xt.grad, x.grad)
