"""Bad input gives a clear Python exception naming the problem and the fix - never a crash."""

import os
import subprocess
import sys

import pytest
import torch

import torch_tpu

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code, **env):
    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env,
                          cwd=REPO, timeout=120)


PROBE = """
import torch, torch_tpu
print("available", torch.tpu.is_available(), torch.tpu.device_count())
try:
    torch.ones(2, device="tpu")
except RuntimeError as e:
    print("ERROR", e)
"""


def test_missing_plugin_file():
    r = run_python(PROBE, TORCH_TPU_PJRT_PLUGIN="/nonexistent/libtpu.so")
    assert r.returncode == 0, r.stderr
    assert "available False 0" in r.stdout
    assert "'/nonexistent/libtpu.so'" in r.stdout and "does not exist" in r.stdout and "Fix:" in r.stdout


def test_library_that_is_not_a_plugin():
    r = run_python(PROBE, TORCH_TPU_PJRT_PLUGIN="/lib/x86_64-linux-gnu/libz.so.1")
    assert r.returncode == 0, r.stderr
    assert "not a PJRT plugin" in r.stdout and "Fix:" in r.stdout


def test_file_that_is_not_a_library():
    r = run_python(PROBE, TORCH_TPU_PJRT_PLUGIN=os.path.join(REPO, "README.md"))
    assert r.returncode == 0, r.stderr
    assert "dlopen failed" in r.stdout


def test_bad_cpu_device_count():
    r = run_python(PROBE, TORCH_TPU_CPU_DEVICE_COUNT="many")
    assert r.returncode == 0, r.stderr
    assert "TORCH_TPU_CPU_DEVICE_COUNT='many'" in r.stdout


def test_default_device_count_is_one():
    env = {k: v for k, v in os.environ.items() if k != "TORCH_TPU_CPU_DEVICE_COUNT"}
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=REPO,
                       timeout=120)
    assert "available True 1" in r.stdout, r.stdout + r.stderr


def test_device_index_out_of_range():
    with pytest.raises(IndexError, match=r"tpu device index 9 is out of range.*valid indices are 0\.\.1"):
        torch.zeros(3, device="tpu:9")
    with pytest.raises(IndexError, match="out of range"):
        torch.randn(3).to("tpu:2")


def test_reading_a_freed_storage():
    t = torch.ones(16, device="tpu")
    t.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError, match="storage was freed or shrunk"):
        t.cpu()
    with pytest.raises(RuntimeError, match="storage was freed or shrunk"):
        t + 1


def test_tensors_on_different_devices():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(2, device="tpu:0") + torch.ones(2, device="tpu:1")
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(2, device="tpu") + torch.ones(2)


def test_shape_errors_match_pytorch():
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        torch.ones(3, device="tpu") + torch.ones(4, device="tpu")
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.ones(3, device="tpu").add_(torch.ones(2, 3, device="tpu"))
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.ones(2, 3, device="tpu") @ torch.ones(2, 3, device="tpu")
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.ones(3, dtype=torch.int64, device="tpu").add_(torch.ones(3, device="tpu"))


def test_strict_fallback_mode_raises():
    torch_tpu.set_fallback_mode("error")
    try:
        with pytest.raises(NotImplementedError, match="no tpu lowering"):
            z = torch.ones(4, dtype=torch.complex64, device="tpu")
            torch.nan_to_num(z)  # no complex lowering
    finally:
        torch_tpu.set_fallback_mode("warn")
    with pytest.raises(RuntimeError, match="'warn' or 'error'"):
        torch_tpu.set_fallback_mode("silent")
