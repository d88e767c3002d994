"""benchmarks/peers.py: the driver's loss check and a short run of the contenders that need no peer
environment (ours Strict against PyTorch CPU eager, each in its own worker process)."""

import importlib.util
import os
import subprocess
import sys

import torch_tpu  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(ROOT, "benchmarks", "peers.py")


def load_driver(monkeypatch):
    # The driver puts benchmarks/ and benchmarks/peers/ on sys.path: undone after the test.
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("peers_driver", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_loss_check_flags_only_disagreeing_contenders(monkeypatch):
    driver = load_driver(monkeypatch)
    ref = [5.8, 5.4, 5.0]
    losses = {"cpu_eager": ref, "close": [x + 1e-5 for x in ref], "far": [5.8, 5.4, 5.1],
              "short": ref[:2]}
    ref_name, diffs, bad = driver.loss_disagreements(losses, 1e-3)
    assert ref_name == "cpu_eager"
    assert sorted(bad) == ["far", "short"]
    assert diffs["close"] < 1e-4 and abs(diffs["far"] - 0.1) < 1e-9


def test_short_run_ours_strict_against_cpu_eager():
    cmd = [sys.executable, DRIVER, "--contenders", "ours_strict", "cpu_eager", "--rounds", "1",
           "--iters", "20", "--steps", "1", "--warmup", "1", "--no-save"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(all agree)" in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("| torch_tpu (ours) Strict")]
    assert len(rows) == 1 and "not run" not in rows[0], done.stdout


def test_bad_arguments_give_a_clear_error():
    done = subprocess.run([sys.executable, DRIVER, "--rounds", "0", "--no-save"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "must be positive" in done.stderr


def test_disagreeing_losses_fail_the_run(monkeypatch, capsys):
    # The real run and check, with ours' losses shifted by 0.1 before the check: the run must end
    # with an error naming the contender, not with a table alone.
    import pytest

    driver = load_driver(monkeypatch)
    check = driver.loss_disagreements

    def shifted(losses, tolerance):
        losses["ours_strict"] = [x + 0.1 for x in losses["ours_strict"]]
        return check(losses, tolerance)

    monkeypatch.setattr(driver, "loss_disagreements", shifted)
    monkeypatch.setattr(sys, "argv", [DRIVER, "--contenders", "ours_strict", "cpu_eager", "--rounds",
                                      "1", "--iters", "10", "--steps", "1", "--warmup", "1", "--no-save"])
    with pytest.raises(SystemExit, match="LOSSES DISAGREE with cpu_eager.*ours_strict"):
        driver.main()
    assert "| LOSSES DISAGREE |" in capsys.readouterr().out
