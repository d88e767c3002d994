"""Backward passes of tpu tensors run on the thread that asks for them (torch_tpu/_autograd_thread.py),
with gradients equal to the CPU's, and PyTorch's device threads stay one switch away."""

import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
import torch.utils.checkpoint

import torch_tpu  # noqa: F401
from torch_tpu import _autograd_thread


def _model_pair(seed=0):
    torch.manual_seed(seed)
    cpu = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))
    import copy

    return cpu, copy.deepcopy(cpu).to("tpu")


def _threads_of_backward(model, x):
    """Runs a backward and returns the thread ids its hooks ran on, and the loss."""
    seen = []
    out = model(x)
    out.register_hook(lambda g: seen.append(threading.get_ident()))
    loss = out.square().mean()
    loss.backward()
    return seen, loss


def _assert_grads_equal(cpu, tpu):
    for (name, p), q in zip(cpu.named_parameters(), tpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.skipif(_autograd_thread.keeps_device_threads(),
                    reason="the environment keeps PyTorch's autograd device threads for this process")
def test_the_importing_thread_runs_its_backward_itself():
    # pytest imports torch_tpu (conftest) on the thread that runs the tests.
    assert torch._C._is_multithreading_enabled() is False
    cpu, tpu = _model_pair()
    x = torch.randn(5, 6)
    cpu_threads, cpu_loss = _threads_of_backward(cpu, x)
    tpu_threads, tpu_loss = _threads_of_backward(tpu, x.to("tpu"))
    assert tpu_threads == [threading.get_ident()] == cpu_threads
    torch.testing.assert_close(tpu_loss.cpu(), cpu_loss)
    _assert_grads_equal(cpu, tpu)


def test_device_threads_on_request_give_the_same_gradients():
    cpu, tpu = _model_pair(1)
    x = torch.randn(4, 6)
    _, cpu_loss = _threads_of_backward(cpu, x)
    with torch.autograd.set_multithreading_enabled(True):
        tpu_threads, tpu_loss = _threads_of_backward(tpu, x.to("tpu"))
    assert tpu_threads and tpu_threads[0] != threading.get_ident()  # PyTorch's device thread
    torch.testing.assert_close(tpu_loss.cpu(), cpu_loss)
    _assert_grads_equal(cpu, tpu)


def test_other_threads_keep_pytorchs_default():
    states = []
    t = threading.Thread(target=lambda: states.append(torch._C._is_multithreading_enabled()))
    t.start()
    t.join(30)
    assert states == [True]


def test_reentrant_checkpoint_and_compiled_backward_on_the_calling_thread():
    cpu, tpu = _model_pair(2)
    x = torch.randn(3, 6, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()

    def run(model, inp):
        h = torch.utils.checkpoint.checkpoint(model, inp, use_reentrant=True)
        return (h * h).sum()

    run(cpu, x).backward()
    run(tpu, xt).backward()
    _assert_grads_equal(cpu, tpu)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-6)

    cpu.zero_grad(set_to_none=True)
    tpu.zero_grad(set_to_none=True)
    compiled = torch.compile(tpu, backend="tpu")
    tpu_threads, tpu_loss = _threads_of_backward(compiled, xt.detach())
    _, cpu_loss = _threads_of_backward(cpu, x.detach())
    assert tpu_threads == [threading.get_ident()]
    torch.testing.assert_close(tpu_loss.cpu(), cpu_loss, rtol=1e-5, atol=1e-6)
    _assert_grads_equal(cpu, tpu)


def test_the_environment_keeps_the_device_threads():
    script = textwrap.dedent(
        """
        import threading, torch, torch_tpu
        x = torch.ones(3, device="tpu", requires_grad=True)
        y = x * 2
        seen = []
        y.register_hook(lambda g: seen.append(threading.get_ident()))
        y.sum().backward()
        print(torch._C._is_multithreading_enabled(), seen[0] != threading.get_ident(), x.grad.cpu().tolist())
        """
    )
    for value, expect in (("1", "True True [2.0, 2.0, 2.0]"), ("0", "False False [2.0, 2.0, 2.0]")):
        env = dict(os.environ, **{_autograd_thread.ENV: value})
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1] == expect, (value, done.stdout)


@pytest.mark.parametrize("value, keeps", [("", False), ("0", False), ("1", True), ("yes", True), ("2", True)])
def test_the_switch_follows_the_projects_rule_for_switches(monkeypatch, value, keeps):
    # As every TORCH_TPU_* switch (common/env_flag.h): set to anything but "" or "0" means on.
    monkeypatch.setenv(_autograd_thread.ENV, value)
    assert _autograd_thread.keeps_device_threads() is keeps
