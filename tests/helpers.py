"""Shared assertions: every tpu result is compared with the same computation on the CPU."""

import glob
import json
import os
import subprocess
import sys

import torch

# Tolerances per dtype for results computed by different (but correct) kernels.
_TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-12, 1e-12),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (1e-3, 1e-3),
}


def assert_close(tpu_value, cpu_value, rtol=None, atol=None):
    """`tpu_value` (a tpu tensor) equals `cpu_value` (a CPU tensor): same shape and dtype, values
    within dtype-aware tolerances (exact for integers and bool)."""
    assert isinstance(tpu_value, torch.Tensor) and tpu_value.device.type == "tpu", tpu_value
    assert cpu_value.device.type == "cpu"
    assert tpu_value.dtype == cpu_value.dtype, (tpu_value.dtype, cpu_value.dtype)
    assert tpu_value.shape == cpu_value.shape, (tpu_value.shape, cpu_value.shape)
    default_rtol, default_atol = _TOL.get(cpu_value.dtype, (0, 0))
    torch.testing.assert_close(
        tpu_value.cpu(),
        cpu_value,
        rtol=default_rtol if rtol is None else rtol,
        atol=default_atol if atol is None else atol,
        equal_nan=True,
    )


def run_both(fn, *tensors, device="tpu"):
    """fn applied to CPU tensors and to their tpu copies: (tpu result, cpu result)."""
    on_tpu = [t.to(device) if isinstance(t, torch.Tensor) else t for t in tensors]
    return fn(*on_tpu), fn(*tensors)


def assert_each_call_is_one_program(calls, eager):
    """Each of `calls` (tpu work), once compiled, runs as exactly one program in eager mode
    `eager`, with no new compile."""
    from torch_tpu.execution_mode import mode

    def counts():
        stats = torch.tpu.compilation_cache_stats()
        return stats["executions"], stats["compiles"]

    with mode(eager):
        for call in calls:
            call()  # compiles
            torch.tpu.synchronize()
            executions, compiles = counts()
            call()
            torch.tpu.synchronize()
            assert counts() == (executions + 1, compiles), (counts(), executions, compiles)


def check_host_kernel_switch(tmp_path, script, target, tol, enabled=True, calls=None):
    """Runs `script` (which prints one ``RESULT {"available": ..., "diff": ...}`` line: whether the
    kernel is registered, and its result's distance from the CPU's) in a fresh process with its
    programs' StableHLO dumped and its own cache, host kernels on or off
    (TORCH_TPU_HOST_KERNELS=0); checks the result is right and the programs call the kernel
    `target` exactly when it is on (or, with `calls` given, exactly when `calls`)."""
    (tmp_path / "dump").mkdir()
    env = dict(os.environ, TORCH_TPU_DUMP_HLO=str(tmp_path / "dump"), TORCH_TPU_CACHE_DIR=str(tmp_path / "c"))
    if not enabled:
        env["TORCH_TPU_HOST_KERNELS"] = "0"
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    result = json.loads(line[7:])
    texts = [open(p).read() for p in glob.glob(str(tmp_path / "dump" / "*.mlir"))]
    assert result["available"] == enabled and result["diff"] < tol
    assert texts and any(target in t for t in texts) == (enabled if calls is None else calls)
