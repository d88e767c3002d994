"""Random ops on the device: dropout, bernoulli, multinomial, randperm and the distribution
fills - reproducible by seed, statistically sane (moments checked)."""

import pytest
import torch


def reproducible(fn):
    torch.manual_seed(11)
    a = fn().cpu()
    torch.manual_seed(11)
    b = fn().cpu()
    assert torch.equal(a, b)
    return a


def test_dropout_scales_and_masks():
    x = torch.ones(200_000, device="tpu")
    y = reproducible(lambda: torch.nn.functional.dropout(x, p=0.3))
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.01
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.7))
    assert torch.equal(torch.nn.functional.dropout(x, p=0.3, training=False).cpu(), x.cpu())


def test_dropout_backward_uses_the_same_mask():
    x = torch.randn(1000, device="tpu", requires_grad=True)
    y = torch.nn.functional.dropout(x, p=0.5)
    y.sum().backward()
    assert torch.equal((x.grad != 0).cpu(), (y != 0).cpu())


def test_bernoulli():
    p = torch.full((100_000,), 0.25, device="tpu")
    b = reproducible(lambda: torch.bernoulli(p))
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    assert abs(b.mean().item() - 0.25) < 0.01
    t = reproducible(lambda: torch.empty(100_000, device="tpu").bernoulli_(0.6))
    assert abs(t.mean().item() - 0.6) < 0.01


@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial(replacement):
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4], device="tpu")
    if replacement:
        s = reproducible(lambda: torch.multinomial(probs, 40_000, replacement=True))
        freq = torch.bincount(s, minlength=4).float() / s.numel()
        assert torch.allclose(freq, probs.cpu(), atol=0.01)
    else:
        draws = torch.stack([torch.multinomial(probs, 2) for _ in range(2000)]).cpu()
        assert (draws[:, 0] != draws[:, 1]).all()
        first = torch.bincount(draws[:, 0], minlength=4).float() / 2000
        assert torch.allclose(first, probs.cpu(), atol=0.04)


def test_randperm():
    p = reproducible(lambda: torch.randperm(1000, device="tpu"))
    assert torch.equal(p.sort().values, torch.arange(1000))
    assert not torch.equal(p, torch.arange(1000))


@pytest.mark.parametrize("kind,args,mean,var", [
    ("exponential_", (2.0,), 0.5, 0.25),
    ("geometric_", (0.25,), 4.0, 12.0),
    ("log_normal_", (0.0, 0.5), 1.1331, 0.3646),
])
def test_distribution_fills(kind, args, mean, var):
    x = reproducible(lambda: getattr(torch.empty(200_000, device="tpu"), kind)(*args)).double()
    assert abs(x.mean().item() - mean) / mean < 0.03
    assert abs(x.var().item() - var) / var < 0.06


def test_cauchy_median():
    x = reproducible(lambda: torch.empty(200_000, device="tpu").cauchy_(1.0, 2.0))
    assert abs(x.median().item() - 1.0) < 0.05


@pytest.mark.parametrize("fill,args", [("normal_", (1.0, 2.0)), ("uniform_", (-1.0, 3.0))])
def test_complex_fills_draw_both_parts_like_the_cpu(fill, args):
    """Complex normal_/uniform_ (behind randn/rand with a complex dtype): real and imaginary parts
    are independent draws; normal_ gives each part half the variance, as on the CPU."""
    x = reproducible(lambda: getattr(torch.empty(200_000, dtype=torch.complex64, device="tpu"), fill)(*args))
    ref = getattr(torch.empty(200_000, dtype=torch.complex64), fill)(*args)
    for part in (torch.real, torch.imag):
        got, want = part(x).double(), part(ref).double()
        assert abs(got.mean().item() - want.mean().item()) < 0.02
        assert abs(got.std().item() / want.std().item() - 1) < 0.02
        assert got.min().item() >= want.min().item() - 0.5 * want.std().item()
    assert abs(torch.corrcoef(torch.stack([x.real, x.imag]).double())[0, 1].item()) < 0.02
    assert torch.randn(4, dtype=torch.complex64, device="tpu").dtype == torch.complex64
