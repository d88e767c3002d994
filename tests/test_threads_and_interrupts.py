"""Threads and interrupts: four Python threads issuing ops on tpu at once (their own tensors,
shared read-only weights) get the CPU's results with no crash or deadlock, in Strict and Fused;
a KeyboardInterrupt in the middle of a long queued sequence, or while a long program compiles,
leaves the process usable and the next ops right. Each case runs in a fresh interpreter with a
hard timeout, so a deadlock fails instead of hanging."""

import os
import subprocess
import sys
import textwrap

import pytest

THREADS = """
import sys, threading, torch, torch_tpu
torch.tpu.eager_mode = getattr(torch.tpu.EagerMode, sys.argv[1])
torch.manual_seed(0)
W = torch.randn(64, 64) * 0.1  # a contraction: float rounding does not grow over the steps
Wd = W.to("tpu")
errors, results = [], {}

def work(i):
    try:
        x = torch.randn(32, 64, generator=torch.Generator().manual_seed(i))
        d = x.to("tpu")
        for step in range(120):
            d = torch.tanh(d @ Wd) + 0.1 * d
            x = torch.tanh(x @ W) + 0.1 * x
            if step % 40 == 0:  # host reads while the other threads keep issuing
                torch.testing.assert_close(d.cpu(), x, rtol=1e-4, atol=1e-4)
        results[i] = (d.cpu(), x)
    except Exception as e:
        errors.append(repr(e))

threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=150)
assert not any(t.is_alive() for t in threads), "a thread is stuck"
assert not errors, errors
assert len(results) == 4
for got, want in results.values():
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
print("ok")
"""

INTERRUPTS = """
import sys, threading, _thread, torch, torch_tpu
torch.tpu.eager_mode = getattr(torch.tpu.EagerMode, sys.argv[1])
x = torch.randn(128, 128)
d = x.to("tpu")

def interrupt_in(seconds):
    threading.Timer(seconds, _thread.interrupt_main).start()

interrupt_in(0.3)
try:
    y = d
    for i in range(10 ** 6):  # far more than 0.3 s of work: queued, then interrupted
        y = torch.tanh(y @ d * 0.01)
    raise AssertionError("not interrupted")
except KeyboardInterrupt:
    pass
torch.tpu.synchronize()
torch.testing.assert_close((d @ d).cpu(), x @ x, rtol=1e-4, atol=1e-3)

def chain(t):
    for k in range(400):
        t = torch.sin(t * 1.001 + k) @ t * 0.001
    return t

# A long program compiling (one Fused Eager graph of the whole chain, compiled at the read).
with torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE):
    try:
        pending = chain(d)
        interrupt_in(0.2)
        pending.cpu()
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    torch.testing.assert_close(chain(d).cpu(), chain(x), rtol=1e-3, atol=1e-3)
print("ok", interrupted)
"""


def run(script, mode):
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": "disabled"}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script), mode], env=env, capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("mode", ["STRICT", "FUSED"])
def test_four_threads_issue_ops_at_once(mode):
    assert "ok" in run(THREADS, mode)


@pytest.mark.parametrize("mode", ["STRICT", "FUSED"])
def test_an_interrupted_queue_or_compile_leaves_the_process_usable(mode):
    out = run(INTERRUPTS, mode)
    assert out.startswith("ok"), out
