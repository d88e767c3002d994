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


def antialiased_resize(x):
    # An aten op without a tpu lowering today (antialiased interpolation); if it gets one,
    # switch these tests to another unlowered aten op.
    return torch.nn.functional.interpolate(x, size=(3, 3), mode="bilinear", antialias=True)


def test_fallback_warns_once_and_counts():
    torch_tpu.reset_fallback_counts()
    x = torch.randn(1, 2, 6, 6)
    t = x.to("tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.lgamma(t)  # lowered: no warning
        r1 = antialiased_resize(t)
        r2 = antialiased_resize(t)
    messages = [str(w.message) for w in caught if "no tpu lowering" in str(w.message)]
    assert len(messages) == 1 and "_upsample_bilinear2d_aa" in messages[0]  # warned once
    assert torch_tpu.fallback_counts() == {"aten::_upsample_bilinear2d_aa.out": 2}
    assert_close(r1, antialiased_resize(x))
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
        with pytest.raises(NotImplementedError, match="_upsample_bilinear2d_aa"):
            antialiased_resize(torch.ones(1, 1, 6, 6, device="tpu"))
    finally:
        torch_tpu.set_fallback_mode("warn")


def test_error_mode_environment():
    code = (
        "import torch, torch_tpu\nx = torch.ones(1, 1, 6, 6, device='tpu')\ntry:\n"
        "    torch.nn.functional.interpolate(x, size=(3, 3), mode='bilinear', antialias=True)\n"
        "except NotImplementedError as e:\n    print('refused', 'TORCH_TPU_FALLBACK' in str(e))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                       env=dict(os.environ, TORCH_TPU_FALLBACK="error"))
    assert "refused True" in r.stdout, r.stdout + r.stderr
