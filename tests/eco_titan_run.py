"""Runs torchtitan training jobs for the tests: ``torchrun --standalone`` (loopback, a free port)
over eco_titan_launch, in a fresh process group with a hard timeout, offline."""

import json
import os
import signal
import subprocess
import sys

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

# The config a user would pass to torchtitan (see eco_titan_config.py).
MODEL_ARGS = ["--module", "eco_titan_config", "--config", "qwen3_debugmodel_tpu"]


def common_args(tokenizer_dir, dataset_dir, dump_folder, *, seq_len, local_batch, steps, global_batch=-1):
    """``global_batch`` > local_batch * ranks: torchtitan accumulates gradients over microbatches."""
    return [
        "--training.global_batch_size", str(global_batch),
        "--hf_assets_path", tokenizer_dir,
        "--dataloader.dataset_path", dataset_dir,
        "--training.seq_len", str(seq_len),
        "--training.local_batch_size", str(local_batch),
        "--training.steps", str(steps),
        "--dump_folder", dump_folder,
        "--debug.seed", "0",
        "--metrics.no-enable-tensorboard",
    ]


def load_checkpoint_args(step0_dir):
    """Start from the weights in a seed checkpoint and never write checkpoints."""
    return ["--checkpoint.enable", "--checkpoint.load_only", "--checkpoint.initial_load_path", step0_dir]


def run_titan(args, *, device, workdir, nproc=1, timeout=300, model_args=MODEL_ARGS):
    """Trains with ``args`` on ``device`` ("tpu" or "cpu") in ``nproc`` ranks; returns the
    launcher's JSON (device, backend, world_size, losses by step, tpu fallbacks). Fails with the
    output's tail when the job fails or outlives ``timeout`` seconds (then every rank is killed)."""
    os.makedirs(workdir, exist_ok=True)
    result_path = os.path.join(workdir, f"result_{device}_{nproc}.json")
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": TESTS_DIR + os.pathsep + env.get("PYTHONPATH", ""),
        "ECO_TITAN_DEVICE": device,
        "ECO_TITAN_LOSSES": result_path,
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": os.path.join(workdir, "hf_home"),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    })
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # the reference must not touch the tpu device
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "eco_titan_launch", *model_args, *args]
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError(f"torchtitan ({device}, {nproc} ranks) ran past {timeout}s:\n{_tail(output)}")
    if proc.returncode != 0:
        raise AssertionError(f"torchtitan ({device}, {nproc} ranks) failed ({proc.returncode}):\n{_tail(output)}")
    with open(result_path) as f:
        result = json.load(f)
    result["losses"] = {int(k): v for k, v in result["losses"].items()}
    result["output"] = output
    return result


def _tail(output, lines=60):
    kept = [line for line in output.splitlines() if "cpu_aot_loader" not in line]
    return "\n".join(kept[-lines:])
