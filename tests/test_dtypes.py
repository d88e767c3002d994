"""Every supported dtype moves, converts and computes like on the CPU; others are refused."""

import pytest
import torch

from helpers import assert_close

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]


def sample(dtype, shape=(4, 5)):
    g = torch.Generator().manual_seed(1)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 10).to(dtype)
    lo = 0 if dtype == torch.uint8 else -50
    return torch.randint(lo, 50, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_roundtrip_is_exact(dtype):
    x = sample(dtype)
    t = x.to("tpu")
    assert t.dtype == dtype
    assert torch.equal(t.cpu(), x)


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", [torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.uint8])
def test_to_dtype_on_device(src, dst):
    x = sample(src)
    assert_close(x.to("tpu").to(dst), x.to(dst))


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != torch.bool])
def test_arithmetic_matches_cpu(dtype):
    a, b = sample(dtype), sample(dtype, (5,))
    if not dtype.is_floating_point:
        b = b.clamp(min=1) if dtype != torch.uint8 else b.clamp(min=1)
    ta, tb = a.to("tpu"), b.to("tpu")
    assert_close(ta + tb, a + b)
    assert_close(ta * tb, a * b)
    if dtype != torch.uint8:
        assert_close(ta - tb, a - b)
    assert_close(ta / tb, a / b)


def test_bool_arithmetic():
    a, b = sample(torch.bool), sample(torch.bool, (5,))
    assert_close(a.to("tpu") + b.to("tpu"), a + b)
    assert_close(a.to("tpu") * b.to("tpu"), a * b)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_unsupported_dtype_is_a_clear_error(dtype):
    x = torch.zeros(3, dtype=dtype)
    with pytest.raises(TypeError, match="tpu does not support dtype"):
        x.to("tpu")
    with pytest.raises(TypeError, match="tpu does not support dtype"):
        torch.empty(3, dtype=dtype, device="tpu")
