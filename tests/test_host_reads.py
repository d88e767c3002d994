"""Blocking host reads (.item(), .cpu(), printing, device checks): on the XLA CPU plugin, whose
device buffers are host memory, a ready buffer is copied in place on the reading thread instead of
through PJRT's device-to-host transfer, which hops over the client's thread pool (~60 us of wake-ups
per read on 2 cores, more than a small program's run). Every dtype, shape and mode reads the same
values as the CPU; errors of the producing program still reach the reader."""

import time

import pytest
import torch

import torch_tpu  # noqa: F401
from device_marks import cpu_plugin_only
from torch_tpu.execution_mode import EagerMode, mode

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.int8, torch.uint8, torch.bool, torch.complex64]


def _reads():
    s = torch.tpu.compilation_cache_stats()
    return s["host_reads"], s["host_reads_in_place"]


def _host(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 5
    if dtype == torch.bool:
        return x > 0
    if dtype.is_complex:
        return torch.complex(x, -x).to(dtype)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5, 4), (256, 129)], ids=str)
def test_read_after_a_program_equals_cpu(dtype, shape):
    """The result of an op (a program's output) reads back as the CPU computes it."""
    x = _host(dtype, shape)
    want = x.flip(-1) if x.dim() else x.clone()
    got = (x.to("tpu").flip(-1) if x.dim() else x.to("tpu").clone()).cpu()
    assert got.device.type == "cpu" and got.dtype == dtype and got.shape == want.shape
    assert torch.equal(got, want), (got, want)


@cpu_plugin_only
def test_reads_are_in_place_on_the_cpu_plugin():
    """Each blocking read of a ready dense buffer is counted; on the CPU plugin it is copied in
    place (the counter the old PJRT transfer never moved)."""
    x = torch.arange(12.0, device="tpu").reshape(3, 4)
    reads, in_place = _reads()
    assert (x * 2).sum().item() == 132.0
    assert torch.equal((x + 1).cpu(), torch.arange(12.0).reshape(3, 4) + 1)
    after_reads, after_in_place = _reads()
    assert after_reads - reads >= 2
    assert after_in_place - in_place == after_reads - reads


@pytest.mark.parametrize("how", ["strict", "fused", "compiled"])
def test_read_in_every_mode(how):
    x = _host(torch.float32, (64, 33))
    w = _host(torch.float32, (33, 8), seed=1)

    def f(a, b):
        return torch.tanh(a @ b).sum(0)

    want = f(x, w)
    xt, wt = x.to("tpu"), w.to("tpu")
    if how == "compiled":
        got = torch.compile(f, backend="tpu")(xt, wt).cpu()
    else:
        with mode(EagerMode.FUSED if how == "fused" else EagerMode.STRICT):
            got = f(xt, wt).cpu()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_read_waits_for_a_long_running_producer():
    """A read issued while its producer still runs waits for it (no stale or partial values)."""
    a = _host(torch.float32, (768, 768))
    want = a
    for _ in range(6):
        want = torch.tanh(want @ a * 0.01)
    t = a.to("tpu")
    out = t
    for _ in range(6):
        out = torch.tanh(out @ t * 0.01)
    torch.testing.assert_close(out.cpu(), want, rtol=1e-4, atol=1e-5)


def test_read_of_a_view_and_of_a_non_contiguous_tensor():
    x = _host(torch.float32, (8, 6, 5))
    t = x.to("tpu")
    assert torch.equal(t.transpose(0, 2).cpu(), x.transpose(0, 2))
    assert torch.equal(t[:, 2:5, ::2].cpu(), x[:, 2:5, ::2])
    assert t[3, 4, 1].item() == x[3, 4, 1].item()


def test_a_failed_device_check_still_reaches_the_reader():
    """A device assertion that fails is raised by the next blocking read, in place or not."""
    t = torch.tensor([0.0, 1.0], device="tpu")
    torch._assert_async(t[0] != 0)
    with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value"):
        t.sum().item()
    assert t.sum().item() == 1.0  # reported once; later reads work


def _first_quartile(times):
    return sorted(times)[len(times) // 4]


@cpu_plugin_only
@pytest.mark.timing
def test_item_of_a_small_compiled_program_is_fast():
    """Guards the speed the in-place read gives, against the same machine's own costs (interleaved,
    so a loaded or slower machine moves them all): .item() of a computed result under 25 us, and a
    tiny compiled program plus .item() at most 20 us more than the program plus a synchronize. On
    a 2-core AMD EPYC, loaded or not: ~11 us and +7 us; with PJRT's transfer instead (a hop over the
    client's pool and back) 35-60 us and +31-50 us. An absolute bound on the whole call (100 us)
    failed there: the call alone took 70-80 us."""
    x = torch.randn(8, device="tpu")
    f = torch.compile(lambda a: (a + 1).sum(), backend="tpu")
    for _ in range(20):
        f(x).item()
    with_read, with_sync, read_only = [], [], []
    for _ in range(300):
        t0 = time.perf_counter()
        f(x).item()
        t1 = time.perf_counter()
        y = f(x)
        torch.tpu.synchronize()
        t2 = time.perf_counter()
        y.item()
        t3 = time.perf_counter()
        with_read.append(t1 - t0)
        with_sync.append(t2 - t1)
        read_only.append(t3 - t2)
    call_read, call_sync, read = (_first_quartile(t) for t in (with_read, with_sync, read_only))
    assert read < 25e-6, f".item() of a computed result: first quartile {read * 1e6:.0f} us"
    assert call_read < call_sync + 20e-6, (
        f"call + .item() {call_read * 1e6:.0f} us against call + synchronize {call_sync * 1e6:.0f} us")
