"""scripts/device_check.sh (the GPU machine's check) in its CPU dry-run mode: the existing venv,
the CPU plugin, a test subset and the tiny Llama in benchmarks/gpu_llama.py (tpu vs CPU)."""

import importlib.util
import json
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest

import torch_tpu  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "device_check.sh")


def _run(args, env_extra=None, timeout=240):
    env = dict(os.environ, TORCH_TPU_PLATFORM="cpu", **(env_extra or {}))
    return subprocess.run(["bash", SCRIPT, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_script_syntax():
    proc = subprocess.run(["bash", "-n", SCRIPT], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


def test_bad_arguments_are_clear_errors(tmp_path):
    proc = _run([])
    assert proc.returncode == 64 and "usage" in proc.stderr
    proc = _run(["--no-such-flag", str(tmp_path)])
    assert proc.returncode == 64 and "unknown option" in proc.stderr


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("device_check")
    proc = _run(["--cpu-dry-run", str(out)])
    return proc, out


def test_dry_run_phases(dry_run):
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "cpu-dry-run" and summary["platform"] == "cpu"
    status = {p["phase"]: p["status"] for p in summary["phases"]}
    assert status == {"build": "skipped", "tests": "ok", "bench": "ok"}
    for name in ("env.txt", "tests.log", "bench.log"):
        assert (out / name).stat().st_size > 0, name
    assert "plugin: cpu" in (out / "env.txt").read_text()


def test_dry_run_test_report(dry_run):
    _, out = dry_run
    suite = ET.parse(out / "tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert int(suite.get("tests")) > 0
    assert int(suite.get("failures")) == 0 and int(suite.get("errors")) == 0


def test_dry_run_benchmark_results(dry_run):
    _, out = dry_run
    data = json.loads((out / "gpu_llama.json").read_text())
    assert data["config"]["dim"] == 64  # the tiny config
    assert data["environment"]["reference_device"] == "cpu"
    assert data["environment"]["tpu_platform"] == "cpu"
    assert set(data["contenders"]) == {"tpu_compile", "tpu_fused", "ref_eager"}
    assert data["errors"] == {} and data["loss_mismatches"] == []
    ref = data["contenders"]["ref_eager"]["losses"]
    for name, r in data["contenders"].items():
        assert r["step_s"] > 0 and r["tokens_per_s"] > 0 and 0 < r["mfu"] < 1, name
        # Same weights and batch as the CPU: bf16 losses agree.
        assert len(r["losses"]) == len(ref)
        for a, b in zip(r["losses"], ref):
            assert abs(a - b) <= 3e-2 + 3e-2 * abs(b), (name, a, b)
    assert data["dispatch_per_op_s"]["tpu"] > 0 and data["dispatch_per_op_s"]["cpu"] > 0
    table = (out / "gpu_llama.md").read_text()
    for name in data["contenders"]:
        assert f"| {name} |" in table


def _bench_module():
    spec = importlib.util.spec_from_file_location("gpu_llama", os.path.join(ROOT, "benchmarks", "gpu_llama.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_flags_disagreeing_losses():
    mod = _bench_module()
    same = {"a": {"losses": [5.0, 4.0]}, "b": {"losses": [5.01, 4.02]}}
    assert mod.check_losses(same, 3e-2, 3e-2) == []
    apart = {"a": {"losses": [5.0, 4.0]}, "b": {"losses": [5.0, 6.0]}}
    assert "step 1" in mod.check_losses(apart, 3e-2, 3e-2)[0]
    nan = {"a": {"losses": [5.0]}, "b": {"losses": [float("nan")]}}
    assert mod.check_losses(nan, 3e-2, 3e-2)
    # The full config is ~1B parameters (the FLOP count the MFU uses is 6N + attention).
    cfg = mod.CONFIGS["full"]
    d, L, h, v = cfg["dim"], cfg["layers"], cfg["hidden"], cfg["vocab"]
    params = L * (4 * d * d + 3 * d * h + 2 * d) + 2 * v * d + d
    assert 0.9e9 < params < 1.1e9
    assert mod.flops_per_step(cfg, params, 2 * v * d) > 6 * (params - 2 * v * d) * cfg["batch"] * cfg["seq"]
    with pytest.raises(SystemExit):
        mod.main(["--contenders", "tpu_eager_bogus", "--ref-device", "cpu"])


def test_reference_in_a_child_process_without_torch_tpu(tmp_path):
    # On cuda the reference contenders always run so: CUDA autograd fails in a process where a
    # PrivateUse1 backend is registered (pytorch/pytorch#161129).
    mod = _bench_module()
    rc = mod.main(["--config", "tiny", "--steps", "1", "--warmup", "1", "--dispatch-iters", "20",
                   "--ref-device", "cpu", "--contenders", "ref_eager,tpu_compile", "--reference-in-child",
                   "--out", str(tmp_path)])
    data = json.loads((tmp_path / "gpu_llama.json").read_text())
    assert rc == 0 and data["errors"] == {} and data["loss_mismatches"] == []
    ref = data["contenders"]["ref_eager"]
    assert ref["process"] == "child" and ref["torch_tpu_loaded"] is False
    assert "process" not in data["contenders"]["tpu_compile"]
    # Each tpu contender reports what a timed step launched: a warm compiled step compiles nothing.
    per = data["contenders"]["tpu_compile"]["per_step"]
    assert per["executions"] >= 1 and per["compiles"] == 0
    prof = data["contenders"]["tpu_compile"]["breakdown"]  # two profiled steps: device vs host
    assert prof["wall_ms"] > 0 and 0 < prof["device_busy_ms"] <= prof["wall_ms"] and prof["programs"] >= 1
    assert list(data["contenders"]) == ["ref_eager", "tpu_compile"]  # the reference stays the base
    assert ref["losses"] == pytest.approx(data["contenders"]["tpu_compile"]["losses"], rel=3e-2, abs=3e-2)


def test_a_crashing_test_file_loses_only_its_own_results(tmp_path):
    # Each file runs in its own pytest process (two at a time here): a segfault in one file is
    # reported as that file's crash, the other files' results stay.
    crash = tmp_path / "test_crashes.py"
    crash.write_text("import os, signal\n\ndef test_crash():\n    os.kill(os.getpid(), signal.SIGSEGV)\n")
    fail = tmp_path / "test_fails.py"
    fail.write_text("def test_fails():\n    assert 1 == 2\n\ndef test_passes():\n    pass\n")
    out = tmp_path / "out"
    proc = _run(["--cpu-dry-run", str(out)], env_extra={
        "DEVICE_CHECK_TESTS": f"{crash} {fail} tests/test_device_facts.py", "DEVICE_CHECK_TEST_WORKERS": "2"})
    assert proc.returncode == 1  # a failed phase
    tests = next(p for p in json.loads((out / "summary.json").read_text())["phases"] if p["phase"] == "tests")
    assert tests["status"] == "failed"
    assert f"crashed (no report): {crash}" in tests["detail"] and f"failures in: {fail}" in tests["detail"]
    log = (out / "tests.log").read_text()
    assert log.index(f"=== {crash}") < log.index(f"=== {fail}") < log.index("=== tests/test_device_facts.py")
    suites = list(ET.parse(out / "tests.xml").getroot())
    assert sum(int(s.get("failures")) for s in suites) == 1
    assert sum(int(s.get("tests")) for s in suites) >= 2 + 5  # the failing file's two, device facts'
