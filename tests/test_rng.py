"""Random numbers on the device: reproducible by seed, state save/restore, sane moments."""

import pytest
import torch

from device_marks import needs_two_devices


def draw():
    return torch.rand(1000, device="tpu").cpu(), torch.randn(1000, device="tpu").cpu()


def test_seed_reproduces_sequences():
    torch.manual_seed(123)
    a = draw()
    torch.manual_seed(123)
    b = draw()
    torch.tpu.manual_seed(123)
    c = draw()
    for x, y, z in zip(a, b, c):
        assert torch.equal(x, y) and torch.equal(x, z)
    torch.manual_seed(124)
    assert not torch.equal(draw()[0], a[0])


def test_successive_draws_differ():
    torch.manual_seed(0)
    assert not torch.equal(torch.rand(100, device="tpu").cpu(), torch.rand(100, device="tpu").cpu())


def test_rng_state_save_restore():
    torch.manual_seed(7)
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = torch.randn(50, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.randn(50, device="tpu").cpu(), first)
    with torch.random.fork_rng(device_type="tpu"):
        torch.rand(10, device="tpu")
    assert torch.tpu.get_rng_state().shape == (16,)


def test_explicit_generator():
    g = torch.Generator(device="tpu").manual_seed(5)
    a = torch.rand(20, device="tpu", generator=g).cpu()
    g.manual_seed(5)
    b = torch.rand(20, device="tpu", generator=g).cpu()
    assert torch.equal(a, b)


@needs_two_devices
def test_each_device_has_its_own_generator():
    torch.manual_seed(3)
    a0 = torch.rand(10, device="tpu:0").cpu()
    torch.manual_seed(3)
    a1 = torch.rand(10, device="tpu:1").cpu()
    assert torch.equal(a0, a1)  # same seed, same stream, whichever device


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_moments(dtype):
    torch.manual_seed(0)
    n = 200_000
    u = torch.rand(n, device="tpu", dtype=dtype).cpu().double()
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    z = torch.randn(n, device="tpu", dtype=dtype).cpu().double()
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    w = torch.empty(n, device="tpu", dtype=dtype).uniform_(-3, 5).cpu().double()
    assert w.min() >= -3 and w.max() <= 5 and abs(w.mean() - 1) < 0.05
    m = torch.empty(n, device="tpu", dtype=dtype).normal_(2.0, 0.5).cpu().double()
    assert abs(m.mean() - 2) < 0.02 and abs(m.std() - 0.5) < 0.02


def test_randint_range_and_uniformity():
    torch.manual_seed(0)
    r = torch.randint(3, 13, (100_000,), device="tpu").cpu()
    assert r.dtype == torch.int64 and r.min() == 3 and r.max() == 12
    counts = torch.bincount(r - 3, minlength=10).double()
    assert (counts / counts.mean() - 1).abs().max() < 0.05
    b = torch.randint(0, 2, (1000,), device="tpu", dtype=torch.bool).cpu()
    assert 300 < b.sum() < 700


def test_invalid_arguments():
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        torch.empty(3, device="tpu").normal_(0, -1)
    with pytest.raises(RuntimeError, match="from=2"):
        torch.empty(3, device="tpu").uniform_(2, 1)
