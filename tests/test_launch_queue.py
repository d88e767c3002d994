"""The launch queue of Strict/Debug eager (runtime/launch_queue.h): per-op executions are handed
to a launcher thread in order, outputs are promised until launched. Results must be exactly
those of launching on the Python thread, and those of the CPU."""

import os
import signal
import subprocess
import sys
import threading
import time

import torch
from torch.testing import assert_close

import torch_tpu
from torch_tpu.execution_mode import EagerMode, mode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _launches():
    return torch_tpu._C._launch_stats()


def _program(device):
    torch.manual_seed(0)
    x = torch.randn(16, 16).to(device)
    w = torch.randn(16, 16).to(device).requires_grad_()
    y = x @ w
    y[:, 3].add_(1)                      # in place through a view
    y.t().mul_(0.5)
    loss = (torch.relu(y) ** 2).sum()
    loss.backward()
    with torch.no_grad():
        w.sub_(0.1 * w.grad)
    return loss.detach().cpu(), w.detach().cpu(), y.detach().cpu()


def test_ops_go_through_the_launcher_and_match_cpu():
    with mode(EagerMode.STRICT):
        before = _launches()
        got = _program("tpu")
        after = _launches()
    assert after["queued"] - before["queued"] >= 10, (before, after)
    assert after["inlined"] == before["inlined"]
    for g, e in zip(got, _program("cpu")):
        assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_long_chains_without_a_host_read():
    # More launches than the queue holds (1024) without a sync: pushing waits for room, the
    # order is kept, in-place updates chain through promised buffers.
    a = torch.zeros(8, device="tpu")
    ref = torch.zeros(8)
    one = torch.arange(8.0)
    one_tpu = one.to("tpu")
    for i in range(3000):
        a.add_(one_tpu)
        ref.add_(one)
        if i % 1000 == 0:
            a = a * 0.5
            ref = ref * 0.5
    assert_close(a.cpu(), ref)


def test_debug_mode_waits_for_each_launch():
    with mode(EagerMode.DEBUG):
        x = torch.randn(256, 256, device="tpu")
        y = x @ x
        assert torch.tpu.current_stream().query()
    assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-4)


def test_several_python_threads_dispatch_at_once():
    errors = []
    results = {}

    def work(k):
        try:
            base = torch.full((32,), float(k), device="tpu")
            acc = torch.zeros(32, device="tpu")
            for j in range(200):
                acc = acc + base * j
            results[k] = acc.cpu()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(4):
        expected = torch.zeros(32)
        for j in range(200):
            expected = expected + torch.full((32,), float(k)) * j
        assert_close(results[k], expected)


def _run_child(code, **env):
    full_env = dict(os.environ, PYTHONPATH=ROOT, **env)
    r = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


CHILD_PROGRAM = """
import torch, torch_tpu, sys
sys.path.insert(0, {root!r})
from tests.test_launch_queue import _program
got = _program("tpu")
ref = _program("cpu")
for g, e in zip(got, ref):
    torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
print(torch_tpu._C._launch_stats()["queued"], torch_tpu._C._launch_stats()["inlined"])
"""


def test_inline_launches_when_asked():
    out = _run_child(CHILD_PROGRAM.format(root=ROOT), TORCH_TPU_LAUNCH_THREAD="0")
    queued, inlined = map(int, out.split())
    assert inlined >= 10 and queued == 0, out


def test_exit_with_launches_in_flight():
    # Thousands of launches still queued when the interpreter exits: no crash, no hang.
    code = ("import torch, torch_tpu\n"
            "a = torch.ones(64, device='tpu')\n"
            "for _ in range(5000): a = a + 1\n"
            "print('queued')\n")
    assert _run_child(code).strip() == "queued"


def test_forked_child_launches_inline():
    # A forked child has no launcher thread: its (CPU-only) work must not wait for one, and the
    # parent keeps launching normally afterwards.
    a = torch.ones(4, device="tpu") + 1
    pid = os.fork()
    if pid == 0:
        try:
            code = 0 if torch_tpu._C._launch_stats()["queued"] >= 0 and torch.ones(2).sum() == 2 else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child hung")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0
    assert_close((a * 3).cpu(), torch.full((4,), 6.0))
