"""What the differential fuzzer (tests/fuzz_ops.py) found, as regular tests: where the CPU has no
kernel for a dtype the tpu raises the same exception class (not a compile error or a made-up
result), integral division by a Python zero raises, NaN * False stays NaN, copy_ checks that its
source broadcasts, and empty inputs behave as on the CPU."""

import pytest
import torch
import torch_tpu  # noqa: F401
from torch_tpu.execution_mode import EagerMode, mode

from helpers import assert_close

_CASES = {
    "abs": lambda a: a.abs(), "floor": lambda a: a.floor(), "ceil": lambda a: a.ceil(),
    "round": lambda a: a.round(), "trunc": lambda a: a.trunc(), "frac": lambda a: a.frac(),
    "bitwise_and": lambda a: a & a, "bitwise_or": lambda a: a | a, "bitwise_xor": lambda a: a ^ a,
    "bitwise_not": lambda a: ~a, "lshift": lambda a: a << a, "rshift": lambda a: a >> a,
    "remainder": lambda a: torch.remainder(a, a), "fmod": lambda a: torch.fmod(a, a),
    "floor_divide": lambda a: torch.floor_divide(a, a), "pow": lambda a: torch.pow(a, a),
    "hypot": lambda a: torch.hypot(a, a), "softmax": lambda a: torch.softmax(a, 0),
    "log_softmax": lambda a: torch.log_softmax(a, 0), "mm": lambda a: a[:, None] @ a[None, :],
    "dot": lambda a: torch.dot(a, a), "mv": lambda a: torch.mv(a[:, None].expand(3, 3), a),
}


def _input(dtype):
    return torch.tensor([1, 2, 3]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.int32, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(_CASES))
def test_same_exception_class_or_same_result_as_the_cpu(name, dtype):
    fn = _CASES[name]
    try:
        want = fn(_input(dtype))
    except Exception as e:  # noqa: BLE001 - the tpu must raise the same class
        with pytest.raises(type(e)):
            fn(_input(dtype).to("tpu")).cpu()
        return
    assert_close(fn(_input(dtype).to("tpu")), want)


@pytest.mark.parametrize("op", [lambda a: a % 0, lambda a: torch.fmod(a, 0), lambda a: a // 0,
                                lambda a: torch.remainder(a, torch.tensor(0))])
def test_integral_division_by_a_python_zero_raises_as_on_the_cpu(op):
    a = torch.tensor([5, -3])
    with pytest.raises(RuntimeError, match="ZeroDivisionError") as cpu_error:
        op(a)
    with pytest.raises(type(cpu_error.value), match="ZeroDivisionError"):
        op(a.to("tpu"))
    empty = torch.empty(0, dtype=torch.int64)
    assert_close(op(empty.to("tpu")), op(empty))  # nothing divides: no error on either
    f = torch.tensor([5.0, -3.0, 0.0])
    assert_close(torch.remainder(f.to("tpu"), 0), torch.remainder(f, 0))  # floats: NaN, no error


@pytest.mark.parametrize("eager", [EagerMode.STRICT, EagerMode.FUSED])
def test_nan_times_false_is_nan(eager):
    x = torch.tensor([float("nan"), float("inf"), 2.0, -3.0])
    m = torch.tensor([False, False, True, False])
    with mode(eager):
        direct = x.to("tpu") * m.to("tpu")
        masked = x.to("tpu") * m.to("tpu").float() + m.to("tpu").to(torch.bfloat16)
        got = (direct.cpu(), masked.cpu())
    torch.testing.assert_close(got[0], x * m, equal_nan=True)
    assert torch.signbit(got[0][3])  # -3 * False is -0.0
    torch.testing.assert_close(got[1], x * m.float() + m.to(torch.bfloat16), equal_nan=True)


def test_empty_integral_softmax_and_bool_products_of_nothing():
    e = torch.empty(0, 3, dtype=torch.int64)
    assert_close(torch.softmax(e.to("tpu"), 1), torch.softmax(e, 1))
    a, b = torch.empty(2, 0, dtype=torch.bool), torch.empty(0, 2, dtype=torch.bool)
    assert_close(a.to("tpu") @ b.to("tpu"), a @ b)


@pytest.mark.parametrize("dst_shape, src_shape", [((0,), (0, 0)), ((3,), (2, 3)), ((2, 3), (1, 3)), ((2, 3), (3,))])
def test_copy_checks_that_the_source_broadcasts_as_on_the_cpu(dst_shape, src_shape):
    src = torch.arange(float(torch.Size(src_shape).numel())).reshape(src_shape)
    try:
        want = torch.zeros(dst_shape).copy_(src)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            torch.zeros(dst_shape, device="tpu").copy_(src.to("tpu"))
        assert "doesn't match the broadcast shape" in str(e)
        return
    assert_close(torch.zeros(dst_shape, device="tpu").copy_(src.to("tpu")), want)
