"""`torch_tpu.bench.threads`: each thread group's CPU time and run-queue wait per step (the
`threads` section of `python -m torch_tpu.bench host`), and the names torch_tpu gives its threads."""

import threading
import time

import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu.bench import host_breakdown, threads
from torch_tpu.bench.models import builtin_step
from torch_tpu.execution_mode import EagerMode, mode

pytestmark = [pytest.mark.skipif(not threads.available(), reason="per-thread scheduler times need Linux /proc schedstat"),
              pytest.mark.timing]


def test_snapshot_sees_this_thread_use_the_cpu():
    me = threading.get_native_id()
    before = threads.snapshot()
    # Spin until this thread has had 50 ms of CPU by its own clock: on a loaded machine (another
    # test process on the other core) 50 ms of wall time can be half of it spent in the run queue.
    start, deadline = time.thread_time(), time.perf_counter() + 30
    while time.thread_time() - start < 0.05 and time.perf_counter() < deadline:
        pass
    after = threads.snapshot()
    assert me in before and me in after
    assert after[me].cpu_ns - before[me].cpu_ns >= 0.04e9  # the scheduler's count agrees


def test_the_launch_queue_thread_is_named():
    # Strict launches through the launch queue's thread, which names itself (csrc/common/thread_name.h);
    # without a name it would be counted with the plugin's unnamed workers.
    with mode(EagerMode.STRICT):
        x = torch.randn(64, 64, device="tpu")
        (x @ x).relu().sum().item()
    names = {s.name for s in threads.snapshot().values()}
    assert "tpu_launcher" in names, sorted(names)
    assert "tf_XLAEigen" in names  # XLA's compute pool, named by the plugin


def _sample(name, cpu_ms, wait_ms, sleeps):
    return threads._Sample(name, int(cpu_ms * 1e6), int(wait_ms * 1e6), sleeps)


def test_cpu_use_groups_threads_per_step():
    before = {1: _sample("python", 10, 1, 5), 2: _sample("tf_XLAEigen", 0, 0, 0), 3: _sample("tf_XLAEigen", 4, 0, 1),
              4: _sample("python", 2, 0, 0), 5: _sample("tpu_launcher", 1, 1, 1), 6: _sample("gloo_tcp_loop", 3, 3, 3)}
    after = {1: _sample("python", 30, 5, 9), 2: _sample("tf_XLAEigen", 16, 8, 10), 3: _sample("tf_XLAEigen", 24, 4, 11),
             4: _sample("python", 8, 2, 4), 5: _sample("tpu_launcher", 5, 3, 5), 6: _sample("gloo_tcp_loop", 3, 3, 3),
             7: _sample("worker", 2, 0, 2)}  # 7 started during the steps; 6 stayed idle
    use = threads.cpu_use(before, after, steps=4, wall_s=0.040, step_thread=1)
    assert use.steps == 4 and use.wall_ms == pytest.approx(10.0)
    got = {g.name: (g.threads, round(g.cpu_ms, 3), round(g.wait_ms, 3), g.sleeps) for g in use.groups}
    assert got == {
        threads.STEP_THREAD: (1, 5.0, 1.0, 1.0),
        "XLA's compute pool": (2, 9.0, 3.0, 5.0),
        threads.UNNAMED: (1, 1.5, 0.5, 1.0),
        "torch_tpu launch queue": (1, 1.0, 0.5, 1.0),
        "threads named 'worker'": (1, 0.5, 0.0, 0.5),
    }
    assert use.groups[0].name == threads.STEP_THREAD  # first, then by CPU time
    assert [g.cpu_ms for g in use.groups[1:]] == sorted((g.cpu_ms for g in use.groups[1:]), reverse=True)
    assert use.cpu_ms == pytest.approx(17.0) and use.wait_ms == pytest.approx(5.0)
    assert use.oversubscribed  # 5 ms of waiting in a 10 ms step
    table = use.table()
    assert "XLA's compute pool (2)" in table and "oversubscribed" in table
    assert use.as_dict()["oversubscribed"] is True


def test_a_step_without_waiting_is_not_oversubscribed():
    before = {1: _sample("python", 0, 0, 0)}
    after = {1: _sample("python", 9, 1, 2)}
    use = threads.cpu_use(before, after, steps=1, wall_s=0.010, step_thread=1)
    assert not use.oversubscribed and "oversubscribed" not in use.table()
    with pytest.raises(ValueError, match="steps >= 1"):
        threads.cpu_use(before, after, steps=0, wall_s=0.01, step_thread=1)


def test_host_breakdown_reports_the_threads():
    with mode(EagerMode.FUSED):
        b = host_breakdown(builtin_step("mlp", read_every=1), steps=3, warmup=2)
    use = b.threads
    assert use is not None and use.steps == 3 and use.wall_ms > 0
    step = use.groups[0]
    assert step.name == threads.STEP_THREAD and step.cpu_ms > 0
    assert any(g.name == "XLA's compute pool" and g.cpu_ms > 0 for g in use.groups)
    # No thread can use more CPU than the wall time allows on the cores it may run on.
    assert use.cpu_ms <= use.wall_ms * use.cores * 1.1
    assert "threads over 3 unprofiled steps" in b.table()
    assert b.as_dict()["threads"]["groups"][0]["name"] == threads.STEP_THREAD
