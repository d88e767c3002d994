"""complex32 (torch.chalf) on the device: stored as the 32 bits of its float16 (real, imag) pair,
moved bit for bit by copies, views and indexing, and computed as complex64 by every other op, the
results narrowed back. Each result is compared with the CPU's: bit for bit where the CPU has a
kernel, against the complex64 computation rounded to complex32 where it has none."""

import warnings

import pytest
import torch

import torch_tpu
from torch_tpu.execution_mode import EagerMode, mode

warnings.filterwarnings("ignore", message="ComplexHalf support is experimental")


def sample(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=torch.complex64, generator=g).chalf()


def same_bits(tpu_value, cpu_value):
    got = tpu_value.cpu()
    assert got.dtype == cpu_value.dtype and got.shape == cpu_value.shape, (got.dtype, got.shape)
    if got.is_complex():
        got, cpu_value = torch.view_as_real(got), torch.view_as_real(cpu_value)
    torch.testing.assert_close(got, cpu_value, rtol=0, atol=0, equal_nan=True)  # exact, NaN where the CPU's is


# What the CPU computes for complex32 (its kernels), each checked bit for bit.
CPU_OPS = {
    "transfer": lambda x: x,
    "to complex64": lambda x: x.cfloat(),
    "to float16 (real part)": lambda x: x.half(),
    "to bool": lambda x: x.bool(),
    "real / imag": lambda x: torch.stack([x.real, x.imag]),
    "view_as_real": lambda x: torch.view_as_real(x),
    "add / sub / mul": lambda x: (x + x) * x - x,
    "scalar multiply": lambda x: x * 2 + 1,
    "neg / conj": lambda x: (-x).conj().resolve_conj(),
    "abs": lambda x: x.abs(),
    "cat / stack": lambda x: torch.cat([x, torch.stack([x[0], x[1]])]),
    "transpose / flip / index": lambda x: x.t().contiguous().flip(0)[[0, 2]],
    "where / masked_fill": lambda x: torch.where(x.real > 0, x, torch.zeros_like(x)).masked_fill(x.imag > 1, 0),
    "comparison": lambda x: (x == x.flip(0)) | (x != 0),
    "fill / ones / full": lambda x: torch.cat([x.clone().fill_(2.5), torch.ones_like(x),
                                               torch.full_like(x, 1.5 - 0.5j)]),
    "copy_ / index_put_": lambda x: x.clone().copy_(x.flip(0)).index_put_((torch.tensor([0], device=x.device),),
                                                                         x[1:2]),
}


@pytest.mark.parametrize("eager", [EagerMode.STRICT, EagerMode.FUSED])
@pytest.mark.parametrize("name", list(CPU_OPS))
def test_what_the_cpu_computes_is_the_same_bits(name, eager, no_fallback):
    x = sample(4, 3)
    want = CPU_OPS[name](x)
    with mode(eager):
        same_bits(CPU_OPS[name](x.to("tpu")), want)


def test_conversions_to_complex32_round_like_the_cpu(no_fallback):
    z = torch.tensor([1 / 3 + 2j, 65504 + 1e-8j, 7e4 - 1j, float("nan"), -0.0j, 1e-8 + 3e-5j])
    for source in (z, z.real, z.real.half(), z.real.double(), torch.tensor([True, False, True, False, True, False])):
        same_bits(source.to("tpu").chalf(), source.chalf())
        same_bits(source.to("tpu").to(torch.complex32), source.to(torch.complex32))


# What the CPU has no complex32 kernel for: computed as complex64 on tpu, narrowed like a
# complex32 result (PyTorch's CUDA kernels do the same arithmetic in complex<float>).
WIDENED_OPS = {
    "div": lambda x: x / (x + 3),
    "exp / sqrt": lambda x: x.exp().sqrt(),
    "sum / mean": lambda x: torch.stack([x.sum(0), x.mean(0)]),
    "matmul": lambda x: x @ x.T,
    "angle": lambda x: x.angle(),
}


@pytest.mark.parametrize("name", list(WIDENED_OPS))
def test_what_the_cpu_lacks_computes_as_complex64(name, no_fallback):
    x = sample(3, 3, seed=1)
    with pytest.raises(NotImplementedError):
        WIDENED_OPS[name](x)  # the CPU has no kernel
    got = WIDENED_OPS[name](x.to("tpu")).cpu()
    want = WIDENED_OPS[name](x.cfloat())
    want = want.chalf() if want.is_complex() else want.half()
    assert got.dtype == want.dtype
    if got.is_complex():
        got, want = torch.view_as_real(got), torch.view_as_real(want)
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-3, atol=2e-3)


def test_compiled_code_and_autocast_free_paths(no_fallback):
    x = sample(4, 4, seed=2)

    def fn(a):
        return torch.cat([a * 2, a.conj().resolve_conj()]).flip(0)

    same_bits(torch.compile(fn, backend="tpu")(x.to("tpu")), fn(x))


def test_a_lowering_for_real_values_still_refuses_complex32():
    x = sample(1, 8, seed=3).to("tpu")
    with pytest.raises(NotImplementedError, match="does not support complex tensors on tpu"):
        torch.nn.functional.avg_pool1d(x, 2)
