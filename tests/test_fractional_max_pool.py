"""nn.FractionalMaxPool2d / 3d on the tpu device: forward values, indices and gradients equal the
CPU kernel's given the same random samples, with no op falling back to the CPU."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401
from tests.helpers import assert_close

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def pool_fn(nd):
    return F.fractional_max_pool2d if nd == 2 else F.fractional_max_pool3d


def run_pool(nd, x, samples, grad=None, **kwargs):
    """(values, indices, input grad) of the functional on x's device."""
    x = x.detach().requires_grad_(True)
    values, indices = pool_fn(nd)(x, return_indices=True, _random_samples=samples, **kwargs)
    g = torch.ones_like(values) if grad is None else grad
    values.backward(g)
    return values, indices, x.grad


def compare(nd, shape, dtype, **kwargs):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float32).to(dtype)
    batch = shape[0] if len(shape) == nd + 2 else 1
    planes = shape[-nd - 1]
    samples = torch.rand(batch, planes, nd, dtype=torch.float32).to(dtype)
    values_cpu, _, _ = run_pool(nd, x, samples, **kwargs)
    grad = torch.randn(values_cpu.shape).to(dtype)
    v_cpu, i_cpu, g_cpu = run_pool(nd, x, samples, grad=grad, **kwargs)
    v_tpu, i_tpu, g_tpu = run_pool(nd, x.to("tpu"), samples.to("tpu"), grad=grad.to("tpu"), **kwargs)
    assert_close(v_tpu, v_cpu, rtol=0, atol=0)  # a max picks an input element: exact
    assert_close(i_tpu, i_cpu)
    assert_close(g_tpu, g_cpu)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,kwargs",
    [
        ((2, 3, 11, 13), dict(kernel_size=3, output_size=(5, 6))),
        ((3, 9, 10), dict(kernel_size=(2, 3), output_ratio=(0.5, 0.7))),  # unbatched
        ((1, 2, 7, 7), dict(kernel_size=2, output_size=(1, 6))),  # a single output row
    ],
)
def test_fractional_max_pool2d_matches_cpu(strict_no_fallback, dtype, shape, kwargs):
    compare(2, shape, dtype, **kwargs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,kwargs",
    [
        ((2, 2, 6, 7, 8), dict(kernel_size=2, output_size=(3, 4, 5))),
        ((2, 5, 6, 7), dict(kernel_size=(1, 2, 3), output_ratio=0.5)),  # unbatched
    ],
)
def test_fractional_max_pool3d_matches_cpu(strict_no_fallback, dtype, shape, kwargs):
    compare(3, shape, dtype, **kwargs)


def test_large_bf16_starts_round_like_cpu(strict_no_fallback):
    # bf16 interval math rounds at every step on the CPU; large planes expose any excess precision.
    compare(2, (1, 4, 300, 301), torch.bfloat16, kernel_size=2, output_size=(190, 170))


@pytest.mark.parametrize("nd", [2, 3])
def test_nan_and_ties_follow_cpu(strict_no_fallback, nd):
    # The CPU scans each window in order and takes x when x > max or x is NaN: the last NaN wins,
    # otherwise the first maximum; an all -inf window reports its first element.
    torch.manual_seed(1)
    spatial = (9, 9) if nd == 2 else (6, 6, 6)
    x = torch.randint(0, 3, (2, 3) + spatial).float()
    flat = x.view(-1)
    flat[torch.randperm(flat.numel())[:20]] = float("nan")
    flat[torch.randperm(flat.numel())[:20]] = float("-inf")
    x[1, 2] = float("-inf")
    samples = torch.rand(2, 3, nd)
    out = (4,) * nd
    v_cpu, i_cpu = pool_fn(nd)(x, 2, output_size=out, return_indices=True, _random_samples=samples)
    v_tpu, i_tpu = pool_fn(nd)(x.to("tpu"), 2, output_size=out, return_indices=True, _random_samples=samples.to("tpu"))
    assert_close(v_tpu, v_cpu, rtol=0, atol=0)
    assert_close(i_tpu, i_cpu)


@pytest.mark.parametrize("nd", [2, 3])
def test_module_on_device(strict_no_fallback, nd):
    # The module draws its samples with torch.rand on the input's device; recover them from a
    # call with the functional and check against the CPU kernel fed the same samples.
    torch.manual_seed(2)
    module_cls = torch.nn.FractionalMaxPool2d if nd == 2 else torch.nn.FractionalMaxPool3d
    pool = module_cls(2, output_ratio=0.5, return_indices=True)
    x = torch.randn((2, 3) + (8,) * nd)
    xt = x.to("tpu").requires_grad_(True)
    values, indices = pool(xt)
    assert values.device.type == "tpu" and values.shape == (2, 3) + (4,) * nd
    values.sum().backward()
    assert xt.grad.device.type == "tpu"
    # each output's gradient lands on its argmax: the grad sums to the output count per plane
    assert_close(xt.grad.sum(dim=tuple(range(2, 2 + nd))), torch.full((2, 3), 4.0**nd))
    # same device generator state -> same samples: redraw them and feed them to the CPU functional
    torch.manual_seed(2)
    samples = torch.rand(2, 3, nd, device="tpu")
    v_cpu, i_cpu = pool_fn(nd)(x, 2, output_ratio=(0.5,) * nd, return_indices=True, _random_samples=samples.cpu())
    assert_close(values.detach(), v_cpu, rtol=0, atol=0)
    assert_close(indices, i_cpu)
    # indices really point at the values in each plane
    gathered = xt.detach().flatten(2).gather(2, indices.flatten(2)).view_as(values)
    assert_close(gathered, values.detach().cpu(), rtol=0, atol=0)


def test_samples_are_uniform_statistically(strict_no_fallback):
    # Different draws choose different windows; over many draws each start position is used.
    pool = torch.nn.FractionalMaxPool2d(2, output_size=(4, 4), return_indices=True)
    x = torch.arange(81.0).view(1, 1, 9, 9).to("tpu")
    seen = set()
    for _ in range(12):
        _, idx = pool(x)
        seen.add(tuple(idx.cpu().view(-1).tolist()))
    assert len(seen) > 1


@pytest.mark.parametrize(
    "args,match",
    [
        (dict(shape=(2, 3, 5, 5), kernel_size=6, output_size=(2, 2)), "too large"),
        (dict(shape=(5, 5), kernel_size=2, output_size=(2, 2)), "3D or 4D"),
        (dict(shape=(1, 2, 5, 5), kernel_size=2, output_size=(2, 2), samples=(1, 1, 2)), "random_samples"),
    ],
)
def test_bad_input_raises(args, match):
    shape = args.pop("shape")
    sshape = args.pop("samples", None)
    x = torch.randn(shape, device="tpu")
    samples = torch.rand(sshape if sshape else (1, max(shape[-3], 1) if len(shape) > 2 else 1, 2), device="tpu")
    with pytest.raises((RuntimeError, ValueError), match=match):
        F.fractional_max_pool2d(x, _random_samples=samples, **args)


def test_extra_samples_are_ignored_like_cpu(strict_no_fallback):
    # The CPU reads only the first batch * planes * n samples; module tests reuse a batched
    # sample tensor for unbatched input.
    x = torch.randn(4, 6, 7, 8)
    samples = torch.rand(2, 4, 3)
    v_cpu, i_cpu = F.fractional_max_pool3d(x, 2, output_size=(3, 3, 4), return_indices=True, _random_samples=samples)
    v_tpu, i_tpu = F.fractional_max_pool3d(
        x.to("tpu"), 2, output_size=(3, 3, 4), return_indices=True, _random_samples=samples.to("tpu")
    )
    assert_close(v_tpu, v_cpu, rtol=0, atol=0)
    assert_close(i_tpu, i_cpu)


def test_integer_input_raises():
    x = torch.ones(1, 1, 4, 4, dtype=torch.int64, device="tpu")
    with pytest.raises(RuntimeError):
        F.fractional_max_pool2d(x, 2, output_size=(2, 2), _random_samples=torch.rand(1, 1, 2, device="tpu"))
