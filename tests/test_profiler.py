"""torch.profiler on the tpu device: device activities of every program execution (Strict per-op
programs, Fused Eager graphs, torch.compile graphs), compile and cache-hit events, device memory
events, key_averages device time, Chrome/Perfetto and TensorBoard traces."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch_tpu  # noqa: F401
from torch.profiler import ProfilerActivity, profile

from torch_tpu.execution_mode import mode

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def _step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def _executions():
    torch.tpu.synchronize()
    return torch.tpu.compilation_cache_stats()["executions"]


def _trace(prof, tmp_path, name="trace.json"):
    path = str(tmp_path / name)
    prof.export_chrome_trace(path)
    with open(path) as f:
        return json.load(f)


def _device_events(trace):
    return [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]


def _profile_steps(run_step, steps, tmp_path):
    """Profiles `steps` calls of run_step; returns (trace json, programs executed meanwhile, prof)."""
    before = _executions()
    with profile(activities=ACTIVITIES) as prof:
        for _ in range(steps):
            run_step()
    executed = _executions() - before
    return _trace(prof, tmp_path), executed, prof


class _Training:
    """The same MLP trained on the CPU and on the tpu; check() compares them."""

    def __init__(self):
        self.x, self.y = _batch()
        self.cpu = _mlp()
        self.dev = _mlp().to("tpu")
        self.cpu_opt = torch.optim.SGD(self.cpu.parameters(), lr=0.1)
        self.dev_opt = torch.optim.SGD(self.dev.parameters(), lr=0.1)
        self.xd, self.yd = self.x.to("tpu"), self.y.to("tpu")

    def cpu_step(self):
        return _step(self.cpu, self.cpu_opt, self.x, self.y)

    def check(self):
        for a, b in zip(self.cpu.parameters(), self.dev.parameters()):
            torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-4, atol=1e-5)


def _assert_device_events(events, executed, kinds):
    assert executed > 0
    assert len(events) == executed, (len(events), executed)
    assert {e["args"]["kind"] for e in events} <= kinds
    for e in events:
        assert e["dur"] > 0, e
        assert e["pid"] == 0 and "tid" in e and e["ts"] > 0, e


def test_supported_activities_lists_privateuse1():
    assert ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()


def test_strict_training_step_device_events(tmp_path, no_fallback):
    t = _Training()
    with mode("strict"):
        for _ in range(2):  # warm: compiles happen outside the profiled steps
            t.cpu_step()
            _step(t.dev, t.dev_opt, t.xd, t.yd)
        t.cpu_step()
        trace, executed, prof = _profile_steps(lambda: _step(t.dev, t.dev_opt, t.xd, t.yd), 1, tmp_path)
    t.check()
    events = _device_events(trace)
    _assert_device_events(events, executed, {"op"})
    # Every per-op program is linked to the aten op that launched it.
    cpu_ids = {e["args"].get("External id") for e in trace["traceEvents"] if e.get("cat") == "cpu_op"}
    assert all(e["args"]["External id"] in cpu_ids for e in events)
    names = {e["args"]["program"] for e in events}
    assert any("addmm" in n or "mm" in n for n in names), names
    # The aten ops show the device time of their programs.
    averages = {a.key: a for a in prof.key_averages()}
    matmul = [a for k, a in averages.items() if k in ("aten::addmm", "aten::mm")]
    assert matmul and all(a.device_time_total > 0 and a.self_device_time_total > 0 for a in matmul)
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=10)
    assert "aten::addmm" in table or "aten::mm" in table


def test_fused_training_step_device_events(tmp_path, no_fallback):
    t = _Training()
    with mode("fused"):
        for _ in range(3):
            t.cpu_step()
            _step(t.dev, t.dev_opt, t.xd, t.yd)
        torch.tpu.synchronize()
        t.cpu_step()
        trace, executed, _ = _profile_steps(lambda: _step(t.dev, t.dev_opt, t.xd, t.yd), 1, tmp_path)
    t.check()
    events = _device_events(trace)
    _assert_device_events(events, executed, {"fused_graph"})
    # The graph was compiled before: its lookup is a cache hit (tier "graph").
    hits = [e for e in trace["traceEvents"] if e.get("name") == "tpu::cache_hit"]
    assert any(h["args"]["tier"] == "graph" for h in hits)


def test_compiled_training_step_device_events(tmp_path, fresh_dynamo, no_fallback):
    t = _Training()

    def fwd_bwd(model, x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    compiled = torch.compile(fwd_bwd, backend="tpu")

    def dev_step():
        t.dev_opt.zero_grad()
        loss = compiled(t.dev, t.xd, t.yd)
        t.dev_opt.step()
        return loss

    for _ in range(3):
        t.cpu_step()
        dev_step()
    t.cpu_step()
    trace, executed, _ = _profile_steps(dev_step, 1, tmp_path)
    t.check()
    events = _device_events(trace)
    _assert_device_events(events, executed, {"compiled_graph", "op"})
    assert any(e["args"]["kind"] == "compiled_graph" for e in events)


def test_compile_then_cache_hits(tmp_path):
    """A fresh disk cache: the first profiled step compiles; after the memory tier is cleared the
    second is answered from disk; the third finds its programs in memory."""
    script = textwrap.dedent(
        """
        import json, sys, torch, torch_tpu
        from torch.profiler import ProfilerActivity, profile
        def run():
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
                a = torch.ones(5, 7, device="tpu")
                b = (a * 3 + 1) @ torch.ones(7, 3, device="tpu")
                v = b.sum().item()
            out = []
            for e in p.events():
                if e.name.startswith("tpu::compile") or e.name == "tpu::cache_hit":
                    out.append(e.name)
            return v, sorted(set(out)), len([n for n in out if n.startswith("tpu::compile")])
        first = run()
        torch.tpu.clear_compilation_cache()
        second = run()
        third = run()
        print(json.dumps([first, second, third]))
        """
    )
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second, third = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = float(((torch.ones(5, 7) * 3 + 1) @ torch.ones(7, 3)).sum())
    assert first[0] == second[0] == third[0] == expected
    assert first[2] > 0 and any(n.startswith("tpu::compile") for n in first[1])
    assert second[2] == 0 and "tpu::cache_hit" in second[1]
    assert third[2] == 0 and "tpu::cache_hit" in third[1]


def test_profile_memory_reports_tpu_allocations_and_frees():
    with profile(activities=ACTIVITIES, profile_memory=True) as prof:
        a = torch.randn(32, 32, device="tpu")
        b = a @ a
        del a
        c = b.sum().item()
    assert c == pytest.approx(float(b.cpu().sum()), rel=1e-5)
    mem = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    tpu = [e for e in mem if e.device_type() == torch.autograd.DeviceType.PrivateUse1]
    assert any(e.nbytes() == 32 * 32 * 4 for e in tpu)
    assert any(e.nbytes() < 0 for e in tpu)
    assert sum(a.self_device_memory_usage for a in prof.key_averages()) != 0


def test_chrome_trace_device_rows(tmp_path):
    x = torch.randn(16, 16, device="tpu")
    with profile(activities=ACTIVITIES) as prof:
        y = (x @ x).relu()
        torch.tpu.synchronize()
    torch.testing.assert_close(y.cpu(), (x.cpu() @ x.cpu()).relu(), rtol=1e-4, atol=1e-5)
    trace = _trace(prof, tmp_path)
    events = _device_events(trace)
    assert len(events) >= 2 and all(e["dur"] > 0 for e in events)
    names = [e for e in trace["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"]
    assert any(e["pid"] == 0 and e["args"]["name"] == "tpu:0" for e in names)


def test_queued_programs_span_their_run_not_their_wait(tmp_path):
    # A loop that enqueues ahead of the devices (no read inside it): each program waits behind the
    # ones launched before it on its device. Its device event spans its run - from the completion
    # of the one before it there, or its launch if later (csrc/profiler/device_timeline.h) - so each
    # device's row is one timeline of back-to-back programs whose lengths add up to at most its
    # busy span, not a stack of overlapping waits; how long each waited is its "queued_ns".
    devices = [torch.device("tpu", i) for i in range(min(2, torch.tpu.device_count()))]
    xs = [torch.randn(384, 384, generator=torch.Generator().manual_seed(i)).to(d) for i, d in enumerate(devices)]
    outs = [[] for _ in devices]
    with profile(activities=ACTIVITIES) as prof:
        ys = list(xs)
        for _ in range(12):
            for i, x in enumerate(xs):
                ys[i] = torch.tanh(ys[i] @ x) * 0.5
                outs[i].append(ys[i])
        # The current device only: tpu:1's programs may still run after the session ends; launched
        # inside it, they are its events all the same.
        torch.tpu.synchronize()
    for x, chain in zip(xs, outs):
        prev = x.cpu()
        for y in chain:  # each step against the CPU's from the same input
            # A 384-term float32 sum in another order: up to ~1e-5 apart near tanh's zero (1 element
            # of 147,456 at 1.3e-5 on an AVX2 CPU, whose dot kernels block the sum differently).
            torch.testing.assert_close(y.cpu(), torch.tanh(prev @ x.cpu()) * 0.5, rtol=1e-4, atol=5e-5)
            prev = y.cpu()
    events = _device_events(_trace(prof, tmp_path))
    for index in range(len(devices)):
        mine = sorted((e for e in events if e["pid"] == index), key=lambda e: e["ts"])
        assert len(mine) >= 24, (index, len(mine))
        assert {e["tid"] for e in mine} == {mine[0]["tid"]}, "in-order programs share one row"
        for a, b in zip(mine, mine[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1.0, (a, b)  # microseconds, rounded
        queued = [e["args"]["queued_ns"] for e in mine]
        assert all(q >= 0 for q in queued) and max(queued) > 0, queued
        span = mine[-1]["ts"] + mine[-1]["dur"] - mine[0]["ts"]
        assert sum(e["dur"] for e in mine) <= span + len(mine)


def test_cpu_only_profile_has_no_device_events(tmp_path):
    x = torch.randn(8, 8, device="tpu")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x + 1).sum().item()
    trace = _trace(prof, tmp_path)
    assert _device_events(trace) == []
    assert any(e.get("cat") == "cpu_op" for e in trace["traceEvents"])


def test_tensorboard_trace_loads_in_tb_profiler(tmp_path):
    t = _Training()
    logdir = tmp_path / "tb"
    with profile(activities=ACTIVITIES, on_trace_ready=torch.profiler.tensorboard_trace_handler(str(logdir))):
        t.cpu_step()
        _step(t.dev, t.dev_opt, t.xd, t.yd)
    t.check()
    files = glob.glob(str(logdir / "*.pt.trace.json"))
    assert len(files) == 1
    with open(files[0]) as f:
        trace = json.load(f)
    assert _device_events(trace)
    data = pytest.importorskip(
        "torch_tb_profiler.profiler.data", reason="torch-tb-profiler (TensorBoard's plugin) is not installed"
    )
    run = data.RunProfileData.parse("worker0", "span", files[0], str(tmp_path))
    assert run.has_kernel and 0 in run.used_devices
    kernels = set(run.kernel_stat.index.get_level_values(0)) if run.kernel_stat is not None else set()
    assert any(str(name).startswith("tpu::op ") for name in kernels), run.kernel_stat
