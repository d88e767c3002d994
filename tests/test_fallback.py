"""Ops without a lowering run on the CPU with a one-time warning and a counter; strict mode
(TORCH_TPU_FALLBACK=error or the API) raises instead."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

import torch_tpu
from helpers import assert_close

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# An operator with only a CPU kernel: a stand-in for any op torch_tpu has no lowering for,
# which stays unlowered as the op library grows.
CPU_ONLY_OP_DEFINITION = """
import torch
lib = torch.library.Library("tpu_test", "DEF")
lib.define("scaled(Tensor x, float f) -> Tensor")
lib.define("scale_(Tensor(a!) x, float f) -> Tensor(a!)")
lib.impl("scaled", lambda x, f: x * f, "CPU")
lib.impl("scale_", lambda x, f: x.mul_(f), "CPU")
"""
exec(CPU_ONLY_OP_DEFINITION)


UNLOWERED_OP = "aten::nan_to_num.out"


def unlowered(x):
    # An aten op without a tpu lowering today (nan_to_num of complex values: its lowering is for
    # real ones); if it gets one, switch these tests to another unlowered aten op.
    return torch.nan_to_num(x.to(torch.complex64)).real


def spd(n=4):
    a = torch.randn(n, n, generator=torch.Generator().manual_seed(n))
    return a @ a.T + n * torch.eye(n)


def test_fallback_warns_once_and_counts():
    torch_tpu.reset_fallback_counts()
    x = spd()
    t = x.to("tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.lgamma(t)  # lowered: no warning
        r1 = unlowered(t)
        r2 = unlowered(t)
    messages = [str(w.message) for w in caught if "no tpu lowering" in str(w.message)]
    assert len(messages) == 1 and UNLOWERED_OP in messages[0]  # warned once
    assert torch_tpu.fallback_counts() == {UNLOWERED_OP: 2}
    assert_close(r1, unlowered(x))
    assert r2.device.type == "tpu"


def test_custom_cpu_only_operator_falls_back():
    torch_tpu.reset_fallback_counts()
    x = torch.randn(8)
    r = torch.ops.tpu_test.scaled(x.to("tpu"), 3.0)
    assert_close(r, x * 3.0)
    assert torch_tpu.fallback_counts() == {"tpu_test::scaled": 1}


def test_fallback_inplace_on_view_writes_back():
    cpu = torch.randn(4, 4)
    t = cpu.to("tpu")
    cpu[:, 1].mul_(-2.0)
    torch.ops.tpu_test.scale_(t[:, 1], -2.0)
    assert_close(t, cpu)


def test_error_mode_api():
    torch_tpu.set_fallback_mode("error")
    try:
        assert torch_tpu.get_fallback_mode() == "error"
        with pytest.raises(NotImplementedError, match="nan_to_num"):
            unlowered(spd().to("tpu"))
    finally:
        torch_tpu.set_fallback_mode("warn")


def test_error_mode_environment():
    code = (
        "import torch, torch_tpu\nx = (torch.eye(4) * 2).to('tpu')\ntry:\n"
        "    torch.nan_to_num(x.to(torch.complex64))\n"
        "except NotImplementedError as e:\n    print('refused', 'TORCH_TPU_FALLBACK' in str(e))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                       env=dict(os.environ, TORCH_TPU_FALLBACK="error"))
    assert "refused True" in r.stdout, r.stdout + r.stderr
