"""Long sums are emitted in two stages (csrc/hlo/reduce_plan.h): XLA:CPU runs a reduce with
its producer fused in as one chain of additions per output, whose rounding error grows with the
chain (a float32 sum of x*x over 262,144 elements was 6e-5 off, relative). Staged, such sums are as
accurate as PyTorch's CPU kernels, and every reduction kind and dtype keeps its exact result. Large
float amax/amin run ATen's kernel inside the program on the CPU plugin, whose own max drops NaNs."""

import pytest
import torch

import torch_tpu  # noqa: F401
from helpers import assert_close
from torch_tpu.execution_mode import EagerMode, mode

SHAPE = (16, 16, 32, 32)


def _x(dtype=torch.float32, seed=0, shape=SHAPE):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype) + 0.5


def _sum_of_squares(x):
    return (x * x).sum()


def _batch_sums(x):
    return (x * x + x).sum((0, 2, 3))


@pytest.mark.parametrize("fn", [_sum_of_squares, _batch_sums], ids=["full", "per_channel"])
@pytest.mark.parametrize("how", ["strict", "fused", "compiled"])
def test_long_sums_of_an_expression_are_as_accurate_as_the_cpu(fn, how):
    x = _x()
    exact = fn(x.double())
    if how == "compiled":
        got = torch.compile(fn, backend="tpu")(x.to("tpu"))
    else:
        with mode(EagerMode.FUSED if how == "fused" else EagerMode.STRICT):
            got = fn(x.to("tpu"))
    cpu_error = ((fn(x).double() - exact).abs().max() / exact.abs().max()).item()
    tpu_error = ((got.cpu().double() - exact).abs().max() / exact.abs().max()).item()
    assert tpu_error <= max(4 * cpu_error, 1e-6), (tpu_error, cpu_error)


def _one_dim(dims):
    """prod/any/all take one dim (the first of several), or none for a full reduction."""
    return {} if len(dims) == 4 else {"dim": dims[0]}


# name -> (function of (x, dims), dtype of the input); the layouts below take every staged form
CASES = {
    "sum f32": (lambda x, d: (x * 2).sum(d), torch.float32),
    "sum f64": (lambda x, d: (x * 2).sum(d), torch.float64),
    "mean f32": (lambda x, d: (x - 1).mean(d), torch.float32),
    "amax f32": (lambda x, d: (x * 3).amax(d), torch.float32),
    "amin f32": (lambda x, d: (x * 3).amin(d), torch.float32),
    "prod f64": (lambda x, d: (1 + x * 1e-3).prod(**_one_dim(d)), torch.float64),
    "sum int64": (lambda x, d: (x * 1000).long().sum(d), torch.float32),
    "any bool": (lambda x, d: (x > 3.5).any(**_one_dim(d)), torch.float32),
    "all bool": (lambda x, d: (x > -3.5).all(**_one_dim(d)), torch.float32),
    "sum complex64": (lambda x, d: torch.complex(x, -x).sum(d), torch.float32),
}
LAYOUTS = {
    "all of a 4-d tensor": (SHAPE, tuple(range(4))),
    "batch statistics (N, H, W)": (SHAPE, (0, 2, 3)),
    "few long rows": ((8, 32768), (1,)),
    "long rows of a 3-d tensor": ((16, 16, 1024), (2,)),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", list(CASES))
def test_staged_reductions_equal_the_cpu(case, layout):
    shape, dims = LAYOUTS[layout]
    fn, dtype = CASES[case]
    x = _x(dtype, seed=1, shape=shape)
    got = torch.compile(lambda t: fn(t, dims), backend="tpu", dynamic=False)(x.to("tpu"))
    want = fn(x, dims)
    if want.dtype.is_floating_point or want.dtype.is_complex:
        assert_close(got, want, rtol=2e-5, atol=1e-3 if want.dtype != torch.float64 else 1e-9)
    else:
        assert_close(got, want)


@pytest.mark.parametrize("how", ["strict", "fused", "compiled"])
@pytest.mark.parametrize("op", ["amax", "amin", "max", "min", "aminmax"])
@pytest.mark.parametrize("layout", ["rows", "all", "per_channel"])
def test_a_max_of_a_stored_tensor_keeps_its_nan(op, layout, how):
    # The XLA CPU plugin hands a plain max/min reduction of a stored array to YNNPACK, whose max
    # drops NaNs (a 256x1024 row max came back finite): large float amax/amin run ATen's kernel
    # inside the program there (csrc/host_aten/extreme_kernel.h).
    shape, dims = {"rows": ((256, 1024), 1), "all": (SHAPE, None), "per_channel": (SHAPE, (0, 2, 3))}[layout]
    x = _x(shape=shape)
    x.view(-1)[4000] = float("nan")
    x.view(-1)[9000] = float("-inf")
    x.view(-1)[12345] = float("inf")

    def fn(t):
        if op == "aminmax":
            return torch.stack(t.aminmax() if not isinstance(dims, int) else t.aminmax(dim=dims))
        name = op if op.startswith("a") else "a" + op
        if dims is None:
            return getattr(t, op)()
        return getattr(t, name)(dims)

    if how == "compiled":
        got = torch.compile(fn, backend="tpu", dynamic=False)(x.to("tpu"))
    else:
        with mode(EagerMode.FUSED if how == "fused" else EagerMode.STRICT):
            got = fn(x.to("tpu"))
    want = fn(x)
    assert_close(got, want)
    assert torch.isnan(got.cpu()).any()


def test_large_float_maxima_take_the_host_kernel_on_the_cpu_plugin():
    assert "torch_tpu_extreme" in torch_tpu._C._host_kernels()
    x = _x(shape=(64, 64))  # 4096 elements, a finite result both ways
    assert_close(x.to("tpu").amax(0), x.amax(0))
    assert_close(x.to("tpu")[:8, :8].amin(), x[:8, :8].amin())  # below the threshold: XLA's reduce


def test_max_pooling_keeps_a_nan():
    x = _x(shape=(4, 8, 32, 32))
    x[1, 2, 5, 6] = float("nan")
    assert_close(torch.nn.functional.max_pool2d(x.to("tpu"), 2), torch.nn.functional.max_pool2d(x, 2))
