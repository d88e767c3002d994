"""linalg.eig / linalg.eigvals of general square matrices on the device: on the XLA CPU plugin the
host kernel torch_tpu_eig runs inside the program (the LAPACK routine the CPU calls, so the same
eigenvalue order and eigenvector normalisation); without it the op takes the counted CPU
fallback. Every result is compared with the CPU's."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu
from helpers import assert_close
from torch_tpu.execution_mode import EagerMode, mode

DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]


def matrices(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def _tol(dtype):
    return 1e-12 if dtype in (torch.float64, torch.complex128) else 1e-5


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 4), (2, 1, 6, 6), (1, 1), (0, 3, 3), (2, 0, 0)])
def test_eig_and_eigvals_equal_the_cpu(dtype, shape, no_fallback):
    a = matrices(*shape, dtype=dtype)
    values, vectors = torch.linalg.eig(a.to("tpu"))
    want_values, want_vectors = torch.linalg.eig(a)
    tol = _tol(dtype)
    assert_close(values, want_values, rtol=tol, atol=tol)  # LAPACK's order, not only the same set
    assert_close(vectors, want_vectors, rtol=tol, atol=tol)  # and its normalisation
    assert_close(torch.linalg.eigvals(a.to("tpu")), torch.linalg.eigvals(a), rtol=tol, atol=tol)
    # The out= forms.
    out_values = torch.empty(0, dtype=values.dtype, device="tpu")
    out_vectors = torch.empty(0, dtype=values.dtype, device="tpu")
    torch.linalg.eig(a.to("tpu"), out=(out_values, out_vectors))
    assert_close(out_values, want_values, rtol=tol, atol=tol)
    assert_close(out_vectors, want_vectors, rtol=tol, atol=tol)
    out = torch.empty(0, dtype=values.dtype, device="tpu")
    torch.linalg.eigvals(a.to("tpu"), out=out)
    assert_close(out, torch.linalg.eigvals(a), rtol=tol, atol=tol)


def test_complex_pairs_of_a_real_matrix_are_conjugate_vectors(no_fallback):
    rotation = torch.tensor([[0.0, -2.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])  # eigenvalues +-2i and 3
    values, vectors = torch.linalg.eig(rotation.to("tpu"))
    want_values, want_vectors = torch.linalg.eig(rotation)
    assert_close(values, want_values)
    assert_close(vectors, want_vectors)
    assert torch.count_nonzero(values.imag.cpu()) == 2
    a = rotation.to(torch.complex64)
    assert_close(a.to("tpu") @ vectors, (vectors * values.unsqueeze(-2)).cpu(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_gradients_equal_the_cpu(dtype, no_fallback):
    a = matrices(2, 4, 4, dtype=dtype, seed=3)

    def loss(x):
        values, vectors = torch.linalg.eig(x)
        # Quantities independent of the eigenvectors' phases (the gradient is defined for those).
        return values.real.sum() + (values.abs() ** 2).sum() + vectors.abs().sum() + torch.linalg.eigvals(x).imag.sum()

    grads = []
    for device in ("tpu", "cpu"):
        x = a.to(device).requires_grad_()
        loss(x).backward()
        grads.append(x.grad)
    assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-4)


def test_inside_a_fused_graph_and_a_compiled_function(no_fallback):
    a = matrices(3, 5, 5, seed=5)

    def fn(x):
        values, vectors = torch.linalg.eig(x * 2 + 1)
        return values.abs() + 1, vectors.abs().sum(-1)

    want = fn(a)
    with mode(EagerMode.FUSED):
        fn(a.to("tpu"))  # compiles
        torch.tpu.synchronize()
        before = torch.tpu.compilation_cache_stats()["executions"]
        got = fn(a.to("tpu"))
        torch.tpu.synchronize()
        # One program, with the eig call inside it.
        assert torch.tpu.compilation_cache_stats()["executions"] - before == 1
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-5, atol=1e-5)
    for g, w in zip(torch.compile(fn, backend="tpu")(a.to("tpu")), want):
        assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_a_matrix_with_nan_is_the_cpus_error_and_the_device_goes_on():
    a = matrices(2, 3, 3, seed=7)
    bad = a.clone()
    bad[1, 0, 0] = float("nan")
    with pytest.raises(RuntimeError, match="should not contain infs or NaNs"):
        torch.linalg.eig(bad)
    with pytest.raises(RuntimeError, match="should not contain infs or NaNs"):
        values, _ = torch.linalg.eig(bad.to("tpu"))
        values.cpu()
    assert_close(torch.linalg.eigvals(a.to("tpu")), torch.linalg.eigvals(a))


def test_bad_input_is_a_clear_error_before_anything_runs(no_fallback):
    with pytest.raises(RuntimeError, match="Expected a float32, float64, complex64 or complex128 tensor"):
        torch.linalg.eig(torch.ones(3, 3, dtype=torch.long, device="tpu"))
    with pytest.raises(RuntimeError, match="Fix: convert with .float()"):
        torch.linalg.eigvals(torch.ones(3, 3, dtype=torch.bfloat16, device="tpu"))
    with pytest.raises(RuntimeError, match="must be batches of square matrices, but they are 3 by 4"):
        torch.linalg.eig(torch.ones(3, 4, device="tpu"))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.linalg.eigvals(torch.ones(3, device="tpu"))


def test_without_the_host_kernel_eig_is_the_counted_cpu_fallback():
    script = textwrap.dedent("""
        import torch, torch_tpu
        a = torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(0))
        values, vectors = torch.linalg.eig(a.to("tpu"))
        want_values, want_vectors = torch.linalg.eig(a)
        assert torch.equal(values.cpu(), want_values) and torch.equal(vectors.cpu(), want_vectors)
        assert "torch_tpu_eig" not in torch_tpu._C._host_kernels()
        counts = torch_tpu.fallback_counts()
        assert any("linalg_eig" in k for k in counts), counts
        print("ok")
    """)
    env = dict(os.environ, TORCH_TPU_HOST_KERNELS="0")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]
