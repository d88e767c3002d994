"""The three eager modes (Debug, Strict, Fused): the API, when work runs, where errors surface,
and that every mode computes the same results (checked against the CPU as well)."""

import os
import subprocess
import sys
import time

import pytest
import torch

import torch_tpu
from torch_tpu.execution_mode import EagerMode, get_mode, mode, set_mode

from helpers import assert_close


@pytest.fixture(autouse=True)
def strict_afterwards():
    yield
    set_mode(EagerMode.STRICT)


def test_mode_api():
    assert get_mode() == EagerMode.STRICT
    with mode(EagerMode.FUSED):
        assert get_mode() == EagerMode.FUSED
        with mode("debug"):
            assert get_mode() == EagerMode.DEBUG
        assert get_mode() == EagerMode.FUSED
    assert get_mode() == EagerMode.STRICT
    set_mode("fused")
    assert get_mode() == EagerMode.FUSED
    with pytest.raises(ValueError, match="unknown eager mode 'fast'.*DEBUG, STRICT, FUSED"):
        set_mode("fast")
    with pytest.raises(TypeError, match="expects an EagerMode"):
        set_mode(3.5)


@pytest.mark.parametrize("env, expected", [
    ({}, "STRICT"),
    ({"TPU_LAUNCH_BLOCKING": "1"}, "DEBUG"),
    ({"TORCH_TPU_DEFER_AND_FUSE": "1"}, "FUSED"),
    ({"TPU_LAUNCH_BLOCKING": "0", "TORCH_TPU_DEFER_AND_FUSE": "0"}, "STRICT"),
])
def test_environment_sets_the_initial_mode(env, expected):
    clean = {k: v for k, v in os.environ.items() if k not in ("TPU_LAUNCH_BLOCKING", "TORCH_TPU_DEFER_AND_FUSE")}
    r = subprocess.run(
        [sys.executable, "-c", "import torch_tpu; print(torch_tpu.execution_mode.get_mode().name)"],
        env={**clean, **env}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == expected


def _heavy(x):
    for _ in range(6):
        x = torch.tanh(x @ x)
    return x


@pytest.mark.timing
def test_strict_returns_before_the_work_is_done():
    x = torch.randn(1024, 1024, device="tpu") / 32
    _heavy(x)
    torch.tpu.synchronize()  # compiled and warm
    start = time.perf_counter()
    y = _heavy(x)
    enqueued = time.perf_counter() - start
    busy = not torch.tpu.current_stream().query()
    torch.tpu.synchronize()
    total = time.perf_counter() - start
    assert busy, "the work had finished before the ops returned"
    assert enqueued < total / 2, (enqueued, total)
    assert_close(y, _heavy(x.cpu()), rtol=1e-4, atol=1e-5)


def test_debug_waits_for_every_op():
    x = torch.randn(1024, 1024, device="tpu") / 32
    with mode(EagerMode.DEBUG):
        y = x @ x
        assert torch.tpu.current_stream().query()
    assert_close(y, x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-5)


def test_device_errors_per_mode():
    # A device fault (the buffer behind a tensor is lost) surfaces at the op in Debug mode,
    # at the next synchronisation point in Strict mode (the op was only queued), naming the op,
    # and at the materialisation point in Fused mode.
    with mode(EagerMode.DEBUG):
        t = torch.ones(8, device="tpu")
        torch_tpu._C._test_lose_device_buffer(t)
        with pytest.raises(RuntimeError, match=r"device error in aten::add.*deleted"):
            t + 1
    with mode(EagerMode.STRICT):
        t = torch.ones(8, device="tpu")
        torch_tpu._C._test_lose_device_buffer(t)
        u = t + 1  # queued, not launched yet
        v = u * 2  # reads the failed output: fails with the same cause
        with pytest.raises(RuntimeError, match=r"device error in aten::add.*deleted"):
            torch.tpu.synchronize()
        with pytest.raises(RuntimeError, match=r"device error in aten::add.*deleted"):
            v.cpu()
        torch.tpu.synchronize()  # the error was reported once
    with mode(EagerMode.FUSED):
        t = torch.ones(8, device="tpu")
        torch.tpu.synchronize()
        torch_tpu._C._test_lose_device_buffer(t)
        u = t + 1  # recorded, not run
        with pytest.raises(RuntimeError, match="device error in a fused graph.*TPU_LAUNCH_BLOCKING=1"):
            u.cpu()
    # The device keeps working afterwards.
    assert_close(torch.ones(3, device="tpu") * 2, torch.ones(3) * 2)


def test_fused_records_until_a_host_read():
    with mode(EagerMode.FUSED):
        torch.tpu.synchronize()
        a = torch.arange(12.0, device="tpu").reshape(3, 4)
        b = (a * 2).t().contiguous() + 1
        assert torch_tpu.execution_mode.pending_ops() >= 3
        cpu = b.cpu()
        assert torch_tpu.execution_mode.pending_ops() == 0
    ref = torch.arange(12.0).reshape(3, 4)
    assert torch.equal(cpu, (ref * 2).t().contiguous() + 1)


def test_switching_mode_flushes():
    set_mode(EagerMode.FUSED)
    x = torch.ones(4, device="tpu") + 1
    assert torch_tpu.execution_mode.pending_ops() > 0
    set_mode(EagerMode.STRICT)
    assert torch_tpu.execution_mode.pending_ops() == 0
    assert_close(x, torch.ones(4) + 1)


def _views_program(device):
    x = torch.arange(24.0, device=device).reshape(4, 6)
    x[:, 1].add_(1)
    x.t().mul_(2)
    x.diagonal().zero_()
    v = x.view(-1)[3:15:2]
    v.sub_(0.5)
    y = x.clone()
    torch.add(x[1], 10, out=y[2])
    w = x.narrow(1, 2, 3).unsqueeze(0).expand(2, 4, 3)
    z = torch.empty(2, 4, 3, device=device)
    torch.mul(w, 3, out=z)
    return x, y, z, x.view(torch.int32)


@pytest.mark.parametrize("m", list(EagerMode))
def test_views_and_inplace_ops_in_every_mode(m):
    expected = _views_program("cpu")
    with mode(m):
        got = _views_program("tpu")
        got = [t.cpu() for t in got]
    for g, e in zip(got, expected):
        assert torch.equal(g, e)


def _random_program(device):
    torch.manual_seed(123)
    a = torch.rand(64, device=device)
    b = torch.randn(8, 8, device=device)
    c = torch.nn.functional.dropout(torch.ones(256, device=device), 0.5, training=True)
    d = torch.empty(32, device=device).uniform_(-2, 3)
    e = torch.randperm(20, device=device)
    return [t.cpu() for t in (a, b, c, d, e)]


def test_rng_streams_agree_in_every_mode():
    strict = _random_program("tpu")
    for m in (EagerMode.DEBUG, EagerMode.FUSED):
        with mode(m):
            other = _random_program("tpu")
        for s, o in zip(strict, other):
            assert torch.equal(s, o), m


def test_no_grad_detach_and_data_in_fused_mode():
    w_cpu = torch.randn(5, 3)
    with mode(EagerMode.FUSED):
        w = w_cpu.clone().to("tpu").requires_grad_()
        loss = (w * w).sum()
        loss.backward()
        with torch.no_grad():
            w -= 0.1 * w.grad
        w.data = w.data * 2
        d = w.detach().add_(1)  # shares storage with w
        got_w, got_d = w.detach().cpu(), d.cpu()
    ref = w_cpu.clone().requires_grad_()
    (ref * ref).sum().backward()
    with torch.no_grad():
        ref -= 0.1 * ref.grad
    ref.data = ref.data * 2
    ref.detach().add_(1)
    assert torch.equal(got_w, ref.detach())
    assert torch.equal(got_d, ref.detach())
