"""The README's distributed run: torchrun --standalone --nproc_per_node=2 of the Llama example
with --ddp and --fsdp (tpu_dist over loopback, one process per rank, each owning one tpu device
selected by torch.tpu.set_device(LOCAL_RANK)) follows the single-process loss curve."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ["--steps", "5", "--batch", "4", "--seq", "16", "--dim", "32", "--log-every", "1", "--lr", "0.01"]


def _run(cmd, timeout=240):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TORCH_TPU_CPU_DEVICE_COUNT", None)  # each process: the plugin's one device
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # DDP has a timer for tpu (distributed/ddp_timer.cc): no warning on every run.
    assert "Time stats are currently only collected" not in out.stderr, out.stderr[-2000:]
    return out.stdout


def _losses(stdout):
    return [float(v) for v in re.findall(r"step +\d+ +loss ([0-9.]+)", stdout)]


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    """Where the example writes its log, metrics and loss curve (not the repository)."""
    return str(tmp_path_factory.mktemp("train_llama"))


@pytest.fixture(scope="module")
def single_process_losses(out_dir):
    return _losses(_run([sys.executable, "examples/train_llama.py", *ARGS, "--out-dir", out_dir]))


@pytest.mark.parametrize("flag", ["--ddp", "--fsdp"])
def test_torchrun_two_processes_follow_the_single_process_curve(flag, single_process_losses, out_dir):
    stdout = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                   "examples/train_llama.py", flag, *ARGS, "--out-dir", out_dir])
    assert "over 2 ranks (tpu_dist, host transport)" in stdout, stdout
    assert "CPU fallbacks: 0" in stdout, stdout
    losses = _losses(stdout)
    assert len(losses) == len(single_process_losses) == 5, stdout
    for step, (got, want) in enumerate(zip(losses, single_process_losses)):
        assert abs(got - want) < 2e-3, (step, got, want)
