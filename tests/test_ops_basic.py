"""The first slice of device computation: elementwise arithmetic with broadcasting, type
promotion and Python scalars; matrix products; reductions - each checked against the CPU."""

import pytest
import torch

from helpers import assert_close, run_both


@pytest.fixture(autouse=True)
def _no_fallback(no_fallback):
    yield


def rand(*shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    return (torch.randn(shape, generator=g) * 3).to(dtype)


@pytest.mark.parametrize("op", [torch.add, torch.sub, torch.mul, torch.div])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (5,))])
def test_binary_broadcasting(op, shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1])
    assert_close(*run_both(op, a, b))


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float64), (torch.int32, torch.float16),
                                    (torch.int64, torch.int8), (torch.bool, torch.int32),
                                    (torch.bfloat16, torch.float32), (torch.uint8, torch.int16)])
def test_type_promotion(dtypes):
    a = rand(3, 4, dtype=dtypes[0]) if dtypes[0] != torch.bool else rand(3, 4) > 0
    b = rand(3, 4, dtype=dtypes[1])
    for op in [torch.add, torch.mul, torch.div]:
        assert_close(*run_both(op, a, b), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.int32])
def test_python_scalars(dtype):
    a = rand(4, 5, dtype=dtype)
    cases = [lambda x: x + 2, lambda x: x * 2.5, lambda x: 3 - x, lambda x: x / 4, lambda x: 2 * x - 1,
             lambda x: x + True, lambda x: torch.add(x, x, alpha=3), lambda x: x * torch.tensor(2.0)]
    for fn in cases:
        assert_close(*run_both(fn, a), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_division_modes(mode, dtype):
    a = torch.tensor([7, -7, 7, -7, 0, 5, -9], dtype=dtype)
    b = torch.tensor([2, 2, -2, -2, 3, 5, 4], dtype=dtype)
    assert_close(*run_both(lambda x, y: torch.div(x, y, rounding_mode=mode), a, b))
    fa, fb = rand(50), rand(50)
    assert_close(*run_both(lambda x, y: torch.div(x, y, rounding_mode=mode), fa, fb))


def test_inplace_and_out_variants():
    a, b = rand(3, 4), rand(3, 4)
    for name in ["add_", "sub_", "mul_", "div_"]:
        ta, ca = a.to("tpu"), a.clone()
        getattr(ta, name)(b.to("tpu"))
        getattr(ca, name)(b)
        assert_close(ta, ca)
    t = a.to("tpu")
    t.add_(b.to("tpu"), alpha=-0.5)
    assert_close(t, a.add(b, alpha=-0.5))
    out = torch.empty(0, device="tpu")
    torch.sub(a.to("tpu"), b.to("tpu"), alpha=2, out=out)
    assert_close(out, torch.sub(a, b, alpha=2))


def test_unary():
    a = rand(4, 6)
    assert_close(*run_both(torch.neg, a))
    assert_close(*run_both(torch.relu, a))
    assert_close(*run_both(lambda x: x ** 2, a))
    t = a.to("tpu")
    t.relu_()
    assert_close(t, a.relu())
    with pytest.raises(RuntimeError, match="bool tensor is not supported"):
        -torch.ones(2, dtype=torch.bool, device="tpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_matrix_products(dtype):
    tol = {"rtol": 2e-2, "atol": 5e-2} if dtype in (torch.bfloat16, torch.float16) else {"rtol": 1e-4, "atol": 1e-4}
    a, b, c = rand(5, 7, dtype=dtype), rand(7, 3, dtype=dtype), rand(5, 3, dtype=dtype)
    assert_close(*run_both(torch.mm, a, b), **tol)
    assert_close(*run_both(lambda x, y: x @ y, a, b), **tol)
    assert_close(*run_both(lambda x: x.t(), a))
    assert_close(*run_both(lambda x, y, z: torch.addmm(z, x, y, beta=0.5, alpha=2), a, b, c), **tol)
    assert_close(*run_both(lambda x, y, z: torch.addmm(z, x, y), a, b, c), **tol)
    p, q = rand(4, 5, 6, dtype=dtype), rand(4, 6, 2, dtype=dtype)
    assert_close(*run_both(torch.bmm, p, q), **tol)
    assert_close(*run_both(torch.matmul, p, q), **tol)
    assert_close(*run_both(torch.matmul, p, rand(6, dtype=dtype)), **tol)
    assert_close(*run_both(lambda x, y: x @ y, rand(3, 5, dtype=dtype), rand(2, 5, 4, dtype=dtype)), **tol)
    v, w = rand(7, dtype=dtype), rand(7, dtype=dtype)
    assert_close(*run_both(torch.mv, a, v), **tol)
    assert_close(*run_both(torch.dot, v, w), **tol)
    assert_close(*run_both(lambda z, x, y: torch.addmv(z, x, y, alpha=2), rand(5, dtype=dtype), a, v), **tol)


def test_addmm_beta_zero_ignores_nan_bias():
    a, b = rand(2, 3), rand(3, 2)
    bias = torch.full((2, 2), float("nan"))
    assert_close(*run_both(lambda z, x, y: torch.addmm(z, x, y, beta=0), bias, a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool, torch.bfloat16])
def test_sum_and_mean(dtype):
    a = rand(3, 4, 5, dtype=dtype) if dtype != torch.bool else rand(3, 4, 5) > 0
    tol = {"rtol": 1e-2, "atol": 1e-1} if dtype == torch.bfloat16 else {}
    for fn in [torch.sum, lambda x: x.sum(1), lambda x: x.sum((0, 2), keepdim=True),
               lambda x: x.sum(-1, dtype=torch.float64)]:
        assert_close(*run_both(fn, a), **tol)
    if dtype.is_floating_point:
        for fn in [torch.mean, lambda x: x.mean(0), lambda x: x.mean((1, 2), keepdim=True)]:
            assert_close(*run_both(fn, a), **tol)
    else:
        with pytest.raises(RuntimeError, match="mean"):
            a.to("tpu").mean()


def test_factories():
    assert_close(torch.zeros(2, 3, device="tpu"), torch.zeros(2, 3))
    assert_close(torch.ones(4, dtype=torch.int16, device="tpu"), torch.ones(4, dtype=torch.int16))
    assert_close(torch.full((3,), -1.5, device="tpu", dtype=torch.float64), torch.full((3,), -1.5, dtype=torch.float64))
    for args in [(10,), (2, 11, 3), (0.0, 1.0, 0.1), (5, -5, -2)]:
        assert_close(torch.arange(*args, device="tpu"), torch.arange(*args))
    assert_close(torch.arange(0, 1, 0.25, device="tpu", dtype=torch.bfloat16), torch.arange(0, 1, 0.25, dtype=torch.bfloat16))
    assert_close(torch.eye(3, 4, device="tpu"), torch.eye(3, 4))
    assert_close(torch.zeros_like(torch.empty(2, 2, device="tpu")), torch.zeros(2, 2))


def test_executables_are_cached_per_signature():
    a, b = rand(16, 16).to("tpu"), rand(16, 16).to("tpu")
    (a + b).cpu()
    before = torch.tpu.compilation_cache_stats()["compiles"]
    for i in range(5):
        (a + b).cpu()
        (a[i] + b[i]).cpu()  # different offsets into the same storages: no new program
    assert torch.tpu.compilation_cache_stats()["compiles"] - before <= 2


@pytest.mark.parametrize("shape", [(1, 1), (2, 1), (1, 3), (1, 1, 1), (3, 4)])
@pytest.mark.parametrize("diagonal", [-2, -1, 0, 1])
def test_tril_triu_small_shapes(shape, diagonal):
    # All-size-1 shapes constant-fold in XLA; a signed compare once folded as unsigned there.
    x = torch.arange(1.0, 1 + torch.Size(shape).numel()).reshape(shape)
    assert_close(*run_both(lambda t: torch.tril(t, diagonal), x))
    assert_close(*run_both(lambda t: torch.triu(t, diagonal), x))


def test_constant_folded_signed_comparisons():
    for a, b in [(-1, 0), (0, -1), (-5, -3), (3, -3)]:
        ta, tb = torch.tensor(a), torch.tensor(b)
        for op in [torch.lt, torch.le, torch.gt, torch.ge]:
            assert_close(*run_both(op, ta, tb))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_shift_operators(dtype):
    """x >> n, x << n and their in-place forms are their own aten ops (not bitwise_*_shift)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 100, (4, 5), generator=g).to(dtype)
    if dtype != torch.uint8:
        a[0] = -a[0]  # arithmetic right shift of negatives
    n = torch.randint(0, 5, (5,), generator=g).to(dtype)

    def ops(x, s):
        y = x.clone()
        y >>= 1
        z = x.clone()
        z <<= s
        return x >> 3, x << 2, x >> s, x << s, y, z

    for got, want in zip(*run_both(ops, a, n)):
        assert got.dtype == want.dtype
        assert torch.equal(got.cpu(), want)
