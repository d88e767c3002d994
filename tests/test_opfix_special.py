"""OpInfo float32 fixes: polygamma on negative inputs and at x = 0, segment_reduce with unsafe
lengths that cover fewer positions than the data, histogram of an empty input. Each result is
compared with the CPU; none may fall back to the CPU."""

import pytest
import torch

import torch_tpu  # noqa: F401
from tests.helpers import assert_close, run_both

# torch.testing's float32 defaults, as the OpInfo sweep compares.
_F32 = dict(rtol=1.3e-6, atol=1e-5)


def _polygamma_inputs():
    torch.manual_seed(0)
    spread = torch.empty(64).uniform_(-9, 9)
    near_poles = torch.tensor([-3.973022, -3.89385, -0.02, -7.95058, -8.478373, -1.5, 0.0, 0.25, 1.0, 7.5])
    return torch.cat([spread, near_poles])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5])
def test_polygamma_float32_matches_cpu(n, strict_no_fallback):
    on_tpu, on_cpu = run_both(lambda x: torch.polygamma(n, x), _polygamma_inputs())
    assert_close(on_tpu, on_cpu, **_F32)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_special_polygamma_bfloat16_matches_cpu(n, strict_no_fallback):
    x = _polygamma_inputs().to(torch.bfloat16)
    on_tpu, on_cpu = run_both(lambda t: torch.special.polygamma(n, t), x)
    assert_close(on_tpu, on_cpu)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_polygamma_bool_input_poles_match_cpu(n, strict_no_fallback):
    # bool promotes to float: False is x = 0, a pole with sign (-1)^(n+1).
    x = torch.tensor([True, False, True, False])
    on_tpu, on_cpu = run_both(lambda t: torch.polygamma(n, t), x)
    assert_close(on_tpu, on_cpu, **_F32)


@pytest.mark.parametrize("reduce", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize("form", ["lengths", "offsets"])
def test_segment_reduce_unsafe_short_lengths_match_cpu(reduce, form, strict_no_fallback):
    torch.manual_seed(1)
    data = torch.randn(10, 3, 2)
    lengths = torch.tensor([1, 2, 0, 6, 0])  # covers 9 of 10 rows: the last row is ignored
    kwargs = {"lengths": lengths} if form == "lengths" else {"offsets": torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])}

    def segment(d, **kw):
        return torch.segment_reduce(d, reduce, axis=0, unsafe=True, initial=2.0, **kw)

    on_tpu = segment(data.to("tpu"), **{k: v.to("tpu") for k, v in kwargs.items()})
    assert_close(on_tpu, segment(data, **kwargs), **_F32)


@pytest.mark.parametrize("density", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_histogram_empty_input_matches_cpu(density, weighted, strict_no_fallback):
    x = torch.empty(5, 0, 5)
    weight = torch.empty(5, 0, 5) if weighted else None
    hist_tpu, edges_tpu = torch.histogram(x.to("tpu"), 3, weight=None if weight is None else weight.to("tpu"), density=density)
    hist_cpu, edges_cpu = torch.histogram(x, 3, weight=weight, density=density)
    assert_close(edges_tpu, edges_cpu, **_F32)
    assert_close(hist_tpu, hist_cpu, **_F32)


def test_histogram_nonempty_still_matches_cpu(strict_no_fallback):
    torch.manual_seed(2)
    x = torch.randn(200)
    hist_tpu, edges_tpu = torch.histogram(x.to("tpu"), 7)
    hist_cpu, edges_cpu = torch.histogram(x, 7)
    assert_close(edges_tpu, edges_cpu, **_F32)
    assert_close(hist_tpu, hist_cpu, **_F32)


def test_digamma_at_signed_zero_and_negatives_matches_cpu(strict_no_fallback):
    # ATen: digamma(+0) = -inf, digamma(-0) = +inf, NaN at negative integers.
    x = torch.cat([torch.tensor([0.0, -0.0, -2.0, 1.0]), _polygamma_inputs()])
    on_tpu, on_cpu = run_both(torch.digamma, x)
    assert_close(on_tpu, on_cpu, **_F32)


@pytest.mark.parametrize("fn", [torch.logaddexp, torch.logaddexp2])
def test_logaddexp_of_equal_finite_values_adds_log_two(fn, strict_no_fallback):
    # log(e^x + e^x) = x + log 2: equal operands are special only when they are infinite.
    a = torch.tensor([1.0, -3.5, 1e4, float("inf"), float("-inf"), float("nan"), 0.0])
    on_tpu, on_cpu = run_both(lambda x: fn(x, x), a)
    assert_close(on_tpu, on_cpu, **_F32)
    b = torch.tensor([[10000.0] * 5] * 3)
    on_tpu, on_cpu = run_both(lambda x: torch.logcumsumexp(x, 1), b)
    assert_close(on_tpu, on_cpu, **_F32)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_gcd_lcm_match_cpu(dtype, strict_no_fallback):
    low = 0 if dtype == torch.uint8 else -60
    g = torch.Generator().manual_seed(3)
    a = torch.randint(low, 60, (6, 7), generator=g, dtype=dtype)
    b = torch.randint(low, 60, (7,), generator=g, dtype=dtype)  # broadcast
    a[0, :3] = 0
    b[:2] = 0  # gcd(0, 0) = 0, lcm(x, 0) = 0
    for fn in (torch.gcd, torch.lcm):
        on_tpu, on_cpu = run_both(fn, a, b)
        assert on_tpu.dtype == on_cpu.dtype
        assert torch.equal(on_tpu.cpu(), on_cpu)
    with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):
        torch.gcd(torch.ones(2, device="tpu"), torch.ones(2, device="tpu"))


def _segment_backward_case(reduce, axis):
    """Data with ties, zeros (one and two per segment) and NaN, segmented along `axis`."""
    g = torch.Generator().manual_seed(4)
    data = torch.randint(-3, 4, (7, 3, 4), generator=g).float()  # small integers: ties and zeros
    data.view(-1)[5] = float("nan")
    lengths = torch.tensor([2, 0, 4, 1]) if axis == 0 else torch.tensor([[1, 2], [3, 0], [0, 3]]).expand(7, 3, 2)
    if axis == 1:
        data = data[:, :, :3].contiguous()
    return data, lengths


@pytest.mark.parametrize("reduce", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("form", ["lengths", "offsets"])
@pytest.mark.parametrize("initial", [None, 2.0])
def test_segment_reduce_backward_matches_cpu(reduce, axis, form, initial, strict_no_fallback):
    data, lengths = _segment_backward_case(reduce, axis)
    if axis == 1:
        data = data.permute(0, 2, 1).contiguous()  # lengths [7, 3, 2] segment dim 2 of [7, 3, 3]
        axis = 2
    if form == "offsets":
        seg = {"offsets": torch.cat([torch.zeros(*lengths.shape[:-1], 1, dtype=torch.long), lengths.cumsum(-1)], -1)}
    else:
        seg = {"lengths": lengths}
    grads = []
    for device in ("cpu", "tpu"):
        x = data.to(device).requires_grad_()
        kw = {k: v.to(device) for k, v in seg.items()}
        out = torch.segment_reduce(x, reduce, axis=axis, initial=initial, **kw)
        w = torch.arange(out.numel(), dtype=torch.float32).reshape(out.shape).to(device) / 7 - 1
        (grad,) = torch.autograd.grad(out, x, w)
        grads.append(grad)
    assert_close(grads[1], grads[0], **_F32)
