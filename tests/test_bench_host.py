"""`python -m torch_tpu.bench host`: the host time of a step per layer of our stack, from the
profiler's host spans (TpuProfilerConfig(host_tracer_level=3)), in Strict, Fused and compiled."""

import json
import subprocess
import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_tpu  # noqa: F401
from torch_tpu import _C
from torch_tpu.bench import host_breakdown
from torch_tpu.bench.breakdown import ISSUING_LAYERS
from torch_tpu.bench.host import warm_up
from torch_tpu.bench.models import builtin_step
from torch_tpu.execution_mode import EagerMode, mode

# Warm-ups that wait for the fuse advisor's timed verdicts, and profiles of whole steps.
pytestmark = pytest.mark.timing

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _check_common(b, steps):
    assert b.steps == steps
    assert b.wall_ms > 0
    assert set(b.layers_ms) == {name for name, _ in ISSUING_LAYERS}
    assert all(v >= 0 for v in b.layers_ms.values()), b.layers_ms
    # The issuing threads' layers (with Python as the remainder) add up to the step's wall time.
    assert sum(b.layers_ms.values()) == pytest.approx(b.wall_ms, rel=0.02)
    # Our own layers were measured, not only left to the remainder.
    assert b.layers_ms["pytorch"] > 0 and b.layers_ms["kernel"] > 0 and b.layers_ms["wait"] > 0
    assert b.device_busy_ms > 0 and b.programs >= 1
    assert b.top_ops and all(ms > 0 and calls > 0 for _, ms, calls in b.top_ops)
    table = b.table()
    for name, _ in ISSUING_LAYERS:
        assert f"  {name} " in table
    assert ("host-bound" in table) != ("device-bound" in table)


def test_strict_breakdown_counts_one_program_per_kernel():
    with mode(EagerMode.STRICT):
        b = host_breakdown(builtin_step("mlp", read_every=1), steps=3, warmup=2)
    _check_common(b, 3)
    assert b.layers_ms["executor"] > 0
    assert b.layers_ms["record"] == 0 and b.layers_ms["flush"] == 0 and b.layers_ms["replay"] == 0
    # Strict runs each tpu kernel as its own program (a few kernels only move or view data).
    assert b.ops >= 50
    assert 0.5 * b.ops <= b.programs <= b.ops
    assert b.launcher_execute_ms + b.layers_ms["pjrt_execute"] > 0


def test_fused_breakdown_records_and_flushes_few_programs():
    with mode(EagerMode.FUSED):
        b = host_breakdown(builtin_step("mlp", read_every=1), steps=3, warmup=3)
    _check_common(b, 3)
    assert b.layers_ms["record"] > 0 and b.layers_ms["flush"] > 0
    assert b.ops >= 50
    assert b.programs <= 5  # the step's graph(s), not one program per op


def test_fused_warm_up_waits_for_the_fuse_advisor():
    # The advisor times a steady Fused loop against the same ops run one by one, some iterations
    # of it in Strict mode: a profile taken during those trials would show a program per op.
    _C._configure_fuse_advisor()  # every graph's advisor afresh: this loop's verdict is not known yet
    step = builtin_step("mlp", read_every=10)
    stats = torch.tpu.compilation_cache_stats
    with mode(EagerMode.FUSED):
        steps, note = warm_up(step, 3)
        after = stats()
        assert note == "" and steps > 3
        assert after["fused_patterns_pending"] == 0 and after["fused_patterns_timed"] >= 1
        for _ in range(20):
            step()
        torch.tpu.synchronize()
        later = stats()
    # Steady: nothing compiled (or loaded from the disk cache, which a warm cache hides compiles
    # behind) or timed any more, including the program of the final wait's cut; op by op only
    # where the verdict said so.
    assert later["compiles"] + later["disk_loads"] == after["compiles"] + after["disk_loads"]
    assert later["fused_patterns_timed"] == after["fused_patterns_timed"]
    if later["fused_patterns_strict"] == 0:
        assert later["fused_ops_run_strictly"] == after["fused_ops_run_strictly"]


def test_warm_up_says_when_the_loop_never_settles():
    shapes = iter(range(1, 10**6))
    with mode(EagerMode.STRICT):  # a new shape each step: a new program each step
        # No time limit (compiles on a loaded machine take seconds): the step limit ends it.
        steps, note = warm_up(lambda: torch.ones(next(shapes), device="tpu").sum().item(), 2, max_more_s=float("inf"),
                              max_more_steps=5)
    assert steps == 7 and "still compiled programs" in note
    assert warm_up(lambda: None, 0) == (0, "")  # no warm-up asked: none


def test_compiled_breakdown_replays():
    with mode(EagerMode.STRICT):
        b = host_breakdown(builtin_step("mlp", compiled=True), steps=3, warmup=3)
    _check_common(b, 3)
    assert b.layers_ms["replay"] > 0
    assert b.layers_ms["compile"] == 0  # warm: nothing compiles inside the profiled steps


def test_a_whole_compiled_step_with_a_graph_break_adds_up():
    # The step's thread sits in the compiled region while autograd's thread runs the backward
    # (Dynamo breaks the graph at backward()): that time is counted once, not on both threads.
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), capturable=True)
    x = torch.randn(32, 64, device="tpu")

    def body():
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss.detach()

    compiled = torch.compile(body, backend="tpu")
    with mode(EagerMode.STRICT):
        b = host_breakdown(lambda: compiled().item(), steps=5, warmup=3)
    assert sum(b.layers_ms.values()) == pytest.approx(b.wall_ms, rel=0.02)
    assert b.layers_ms["replay"] > 0 and b.layers_ms["python"] > 0


def test_host_spans_are_off_at_the_default_level():
    step = builtin_step("mlp")
    step()
    for config in (None, torch.tpu.profiler.TpuProfilerConfig()):
        with profile(activities=ACTIVITIES, experimental_config=config) as prof:
            step()
            torch.tpu.synchronize()
        names = {e.name() for e in prof.profiler.kineto_results.events()}
        assert not {"tpu::kernel", "tpu::executor", "tpu::wait", "tpu::launch_queue"} & names
        assert any(n.startswith("tpu::") for n in names)  # the device programs are still there


def test_host_spans_are_in_the_chrome_trace(tmp_path):
    path = tmp_path / "trace.json"
    host_breakdown(builtin_step("mlp"), steps=1, warmup=1, trace=str(path))
    events = json.loads(path.read_text())["traceEvents"]
    spans = {e["name"] for e in events if e.get("cat") == "tpu_host" or e.get("args", {}).get("layer")}
    assert {"tpu::kernel", "tpu::wait"} <= spans, sorted(spans)


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_builtin_steps_train_like_the_cpu(name):
    tpu, cpu = builtin_step(name), builtin_step(name, device="cpu")
    for _ in range(3):
        got, want = tpu(), cpu()
        torch.testing.assert_close(got.cpu(), want, rtol=2e-4, atol=2e-4)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="steps >= 1"):
        host_breakdown(lambda: None, steps=0)


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "torch_tpu.bench", *args], capture_output=True, text=True,
                          timeout=240, cwd=cwd)


def test_cli_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "b.json"
    r = _cli("host", "--model", "mlp", "--mode", "fused", "--steps", "2", "--warmup", "2", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "host time per step" in r.stdout and "built-in mlp, mode fused, after" in r.stdout
    data = json.loads(out.read_text())
    assert data["mode"] == "fused" and data["steps"] == 2
    assert sum(data["layers_ms"].values()) == pytest.approx(data["wall_ms"], rel=0.02)


def test_cli_runs_a_user_step(tmp_path):
    (tmp_path / "my_step.py").write_text(
        "import torch\n"
        "def make():\n"
        "    w = torch.randn(64, 64, device='tpu')\n"
        "    return lambda: (w @ w).relu().sum().item()\n")
    r = _cli("host", "--step", "my_step:make", "--steps", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "my_step:make, mode strict" in r.stdout


@pytest.mark.parametrize("spec, message", [
    ("no_colon", "takes module:function"),
    ("no_such_module_xyz:make", "cannot load it"),
])
def test_cli_bad_step_is_a_clear_error(tmp_path, spec, message):
    r = _cli("host", "--step", spec, cwd=tmp_path)
    assert r.returncode != 0
    assert message in r.stderr
    assert "Traceback" not in r.stderr
