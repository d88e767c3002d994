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


def unlowered(x):
    return torch.fft.fft(x)  # complex results: no tpu lowering


def test_fallback_warns_once_and_counts():
    torch_tpu.reset_fallback_counts()
    x = torch.randn(8)
    t = x.to("tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.lgamma(t)  # lowered: no warning
        r1 = torch.special.i0(t)
        r2 = torch.special.i0(t)
    messages = [str(w.message) for w in caught if "no tpu lowering" in str(w.message)]
    assert len(messages) <= 1  # warned at most once for the op
    counts = torch_tpu.fallback_counts()
    assert counts.get("aten::i0.out", 0) + counts.get("aten::i0", 0) == 2
    assert_close(r1, torch.special.i0(x))
    assert r2.device.type == "tpu"


def test_fallback_inplace_on_view_writes_back():
    cpu = torch.randn(4, 4)
    t = cpu.to("tpu")
    cpu[:, 1].i0_()
    t[:, 1].i0_()
    assert_close(t, cpu)


def test_error_mode_api():
    torch_tpu.set_fallback_mode("error")
    try:
        assert torch_tpu.get_fallback_mode() == "error"
        with pytest.raises(NotImplementedError, match="i0"):
            torch.special.i0(torch.ones(2, device="tpu"))
    finally:
        torch_tpu.set_fallback_mode("warn")


def test_error_mode_environment():
    code = "import torch, torch_tpu\ntry:\n    torch.special.i0(torch.ones(2, device='tpu'))\nexcept NotImplementedError as e:\n    print('refused', 'TORCH_TPU_FALLBACK' in str(e))\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                       env=dict(os.environ, TORCH_TPU_FALLBACK="error"))
    assert "refused True" in r.stdout, r.stdout + r.stderr
