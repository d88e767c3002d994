"""A quiet, safe warm start: executables loaded from the disk tier of the compilation cache print
nothing (the XLA CPU plugin's tuning-feature false alarm is filtered, see docs/design.md), give the
CPU's results, and an entry compiled on a CPU with an instruction-set extension this one lacks is
recompiled instead of loaded (it could stop the process with SIGILL)."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch

import torch_tpu  # noqa: F401  (registers the device in this process too)

# A child process: a tiny MLP forward and backward on the tpu device; prints results and stats.
CHILD = r"""
import json, torch, torch_tpu
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
x = torch.randn(5, 8)
model.to("tpu")
loss = model(x.to("tpu")).square().mean()
loss.backward()
grads = [p.grad.cpu().tolist() for p in model.parameters()]
print(json.dumps({"loss": loss.item(), "grads": grads, "stats": torch.tpu.compilation_cache_stats()}))
"""

# An absl log line of the plugin ("E0000 00:00:... file.cc:N] ...") or absl's one-time preface.
PLUGIN_LOG = re.compile(r"^[IWEF]\d{4} |absl::InitializeLog|cpu_aot_loader", re.M)
HOOK = "TORCH_TPU_CACHE_HOST_FEATURES"


def run_child(cache_dir, host_features=None):
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": str(cache_dir), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop(HOOK, None)
    if host_features is not None:
        env[HOOK] = host_features
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["stderr"] = r.stderr
    return out


def cpu_reference():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    loss = model(x).square().mean()
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


def assert_matches_cpu(result):
    loss, grads = cpu_reference()
    torch.testing.assert_close(torch.tensor(result["loss"]), loss, rtol=1e-5, atol=1e-5)
    assert len(result["grads"]) == len(grads)
    for got, want in zip(result["grads"], grads):
        torch.testing.assert_close(torch.tensor(got), want, rtol=1e-5, atol=1e-5)


def host_flags():
    """This machine's CPU flags as the kernel lists them (what the cache records)."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name.strip() in ("flags", "Features"):
                return value.split()
    return []


def test_warm_start_is_quiet_and_matches_cpu(tmp_path):
    cold = run_child(tmp_path)
    assert cold["stats"]["compiles"] > 0 and cold["stats"]["disk_writes"] == cold["stats"]["compiles"]
    warm = run_child(tmp_path)
    assert warm["stats"]["compiles"] == 0
    assert warm["stats"]["disk_loads"] == cold["stats"]["compiles"]
    assert warm["stats"]["disk_host_mismatch"] == 0 and warm["stats"]["disk_rejected"] == 0
    assert not PLUGIN_LOG.search(warm["stderr"]), warm["stderr"][:2000]
    for result in (cold, warm):
        assert_matches_cpu(result)


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="the CPU record is read from /proc/cpuinfo (Linux)")
def test_entries_from_a_cpu_with_more_extensions_are_recompiled(tmp_path):
    # Written by "a machine" with every flag of this one plus an extension this one lacks.
    richer = " ".join(host_flags() + ["tpu_test_future_isa"])
    cold = run_child(tmp_path, host_features=richer)
    n = cold["stats"]["compiles"]
    assert n > 0 and cold["stats"]["disk_writes"] == n
    here = run_child(tmp_path)  # this machine: none may be loaded, all are recompiled
    assert here["stats"]["disk_host_mismatch"] == n
    assert here["stats"]["disk_loads"] == 0 and here["stats"]["compiles"] == n
    assert here["stats"]["disk_rejected"] == 0 and here["stats"]["disk_writes"] == n
    assert not PLUGIN_LOG.search(here["stderr"]), here["stderr"][:2000]
    again = run_child(tmp_path)  # the recompiled entries were recorded for this machine
    assert again["stats"]["disk_loads"] == n and again["stats"]["compiles"] == 0
    assert again["stats"]["disk_host_mismatch"] == 0
    for result in (cold, here, again):
        assert_matches_cpu(result)


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="the CPU record is read from /proc/cpuinfo (Linux)")
def test_entries_from_a_cpu_with_fewer_extensions_are_loaded(tmp_path):
    flags = host_flags()
    assert flags, "no CPU flags in /proc/cpuinfo"
    older = " ".join(flags[: max(1, len(flags) // 2)])  # a subset of this machine's extensions
    cold = run_child(tmp_path, host_features=older)
    warm = run_child(tmp_path)
    assert warm["stats"]["disk_loads"] == cold["stats"]["compiles"] and warm["stats"]["compiles"] == 0
    assert warm["stats"]["disk_host_mismatch"] == 0
    assert_matches_cpu(warm)
