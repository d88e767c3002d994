"""Factorizations and solvers on the device - Cholesky, triangular solves, LU (factor, unpack,
solve), solve, inv, det, slogdet, cholesky_solve/inverse - batched and broadcast, with their
gradients, each compared with the CPU (LAPACK)."""

import pytest
import torch

from helpers import assert_close, run_both


@pytest.fixture(autouse=True)
def _no_fallback(no_fallback):
    yield


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def spd(*shape, dtype=torch.float32):
    a = rand(*shape, dtype=torch.float64)
    return (a @ a.mT + shape[-1] * torch.eye(shape[-1], dtype=torch.float64)).to(dtype)


def check(fn, *inputs, tol=1e-4):
    got, want = run_both(fn, *inputs)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert_close(g, w, rtol=tol, atol=tol)


def check_grad(fn, *inputs, tol=1e-3):
    grads = []
    for device in ("tpu", "cpu"):
        leaves = [t.detach().to(device).requires_grad_() for t in inputs]
        out = fn(*leaves)
        out = out if isinstance(out, tuple) else (out,)
        total = sum((o * torch.linspace(0.5, 1.5, o.numel(), device=device, dtype=o.dtype).reshape(o.shape)).sum()
                    for o in out if o.is_floating_point())
        grads.append(torch.autograd.grad(total, leaves))
    for g_tpu, g_cpu in zip(*grads):
        assert_close(g_tpu, g_cpu, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (3, 5, 5), (2, 2, 3, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cholesky(shape, dtype):
    a = spd(*shape, dtype=dtype)
    check(torch.linalg.cholesky, a)
    check(lambda t: torch.linalg.cholesky(t, upper=True), a)
    check_grad(torch.linalg.cholesky, a)


def test_cholesky_reports_the_failing_minor():
    a = spd(3, 4, 4)
    a[1, 2, 2] = -100.0  # batch 1 stops being positive definite at order 3
    got, want = run_both(lambda t: torch.linalg.cholesky_ex(t).info, a)
    assert_close(got, want)
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):
        torch.linalg.cholesky(a.to("tpu"))


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(upper, left, unit):
    a = rand(2, 4, 4) + 4 * torch.eye(4)
    b = rand(3, 1, 4, 2) if left else rand(3, 1, 2, 4)  # batch dims broadcast
    check(lambda x, y: torch.linalg.solve_triangular(x, y, upper=upper, left=left, unitriangular=unit), a, b)
    check_grad(lambda x, y: torch.linalg.solve_triangular(x, y, upper=upper, left=left, unitriangular=unit), a, b)


def test_triangular_solve_legacy():
    a, b = rand(4, 4) + 4 * torch.eye(4), rand(4, 3)
    check(lambda y, x: torch.triangular_solve(y, x, upper=False, transpose=True), b, a)


@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (2, 6, 4), (3, 4, 6)])
def test_lu_factor_and_unpack(shape):
    a = rand(*shape)
    check(torch.linalg.lu_factor, a)
    check(torch.linalg.lu, a)
    check(lambda t: torch.lu_unpack(*torch.linalg.lu_factor(t)), a)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(left, adjoint):
    a = rand(3, 4, 4)
    b = rand(3, 4, 2) if left else rand(3, 2, 4)
    fn = lambda x, y: torch.linalg.lu_solve(*torch.linalg.lu_factor(x), y, left=left, adjoint=adjoint)  # noqa: E731
    check(fn, a, b)
    check_grad(fn, a, b)


def test_solve_inv_det_slogdet():
    a = rand(3, 5, 5)
    check(torch.linalg.solve, a, rand(3, 5, 2))
    check(torch.linalg.solve, a, rand(3, 5))  # vector right-hand side
    check(torch.linalg.solve, a, rand(5, 2))  # broadcast
    check(lambda x, y: torch.linalg.solve(x, y, left=False), a, rand(3, 2, 5))
    check(torch.linalg.inv, a)
    check(torch.linalg.det, a)
    check(torch.linalg.slogdet, a)
    check(torch.logdet, spd(2, 4, 4))
    check(lambda t: torch.linalg.matrix_power(t, -3), a)
    for fn in (torch.linalg.solve, lambda x, y: torch.linalg.inv(x) @ y):
        check_grad(fn, a, rand(3, 5, 2))
    check_grad(torch.linalg.det, a)
    check_grad(lambda t: torch.linalg.slogdet(t).logabsdet, a)


def test_singular_matrices():
    s = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    check(torch.linalg.det, s)
    got, want = run_both(lambda t: torch.linalg.inv_ex(t).info, s)
    assert_close(got, want)
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.inv(s.to("tpu"))


def test_cholesky_solve_and_inverse():
    a = spd(2, 4, 4)
    for upper in (False, True):
        factor = torch.linalg.cholesky(a, upper=upper)
        check(lambda b, f: torch.cholesky_solve(b, f, upper=upper), rand(2, 4, 3), factor)
        check(lambda f: torch.cholesky_inverse(f, upper=upper), factor[0])


def test_non_float_input_raises_clear_error():
    with pytest.raises(RuntimeError, match="Expected a float32, float64, complex64 or complex128 tensor"):
        torch.linalg.cholesky(torch.eye(3, dtype=torch.float16, device="tpu"))


# ---- decompositions --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eigh(dtype):
    a = rand(3, 5, 5, dtype=dtype)
    sym = a + a.mT
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    check(torch.linalg.eigvalsh, sym, tol=tol)
    check(lambda t: torch.linalg.eigvalsh(t, UPLO="U"), sym, tol=tol)
    # Eigenvectors are unique up to sign: check the decomposition itself on the device. (XLA's
    # Jacobi iteration stops at ~sqrt(eps) off-diagonal mass: float64 vectors hold ~1e-8.)
    w, v = torch.linalg.eigh(sym.to("tpu"))
    vtol = 1e-4 if dtype == torch.float32 else 1e-7
    assert_close(v @ torch.diag_embed(w) @ v.mT, sym, rtol=vtol, atol=vtol)
    assert_close(v.mT @ v, torch.eye(5, dtype=dtype).expand(3, 5, 5).contiguous(), rtol=vtol, atol=vtol)
    check_grad(torch.linalg.eigvalsh, sym.to(dtype))


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (2, 3, 5)])
def test_svd(shape):
    a = rand(*shape)
    check(torch.linalg.svdvals, a)
    for full in (False, True):
        u, s, vh = torch.linalg.svd(a.to("tpu"), full_matrices=full)
        _, s_cpu, _ = torch.linalg.svd(a, full_matrices=full)
        assert u.shape == torch.linalg.svd(a, full_matrices=full).U.shape
        assert_close(s, s_cpu, rtol=1e-4, atol=1e-4)
        k = min(shape[-2:])
        recon = u[..., :, :k] @ torch.diag_embed(s) @ vh[..., :k, :]
        assert_close(recon, a, rtol=1e-4, atol=1e-4)
        eye_u = torch.eye(u.shape[-1]).expand(u.mT.shape[:-1] + (u.shape[-1],)).contiguous()
        assert_close(u.mT @ u, eye_u, rtol=1e-4, atol=1e-4)
    check(torch.linalg.pinv, a)
    check(lambda t: torch.linalg.matrix_norm(t, "nuc"), a)
    check(lambda t: torch.linalg.matrix_norm(t, 2), a)
    check_grad(torch.linalg.svdvals, a)


def _rank_deficient():
    g = torch.Generator().manual_seed(5)
    low = torch.randn(6, 2, generator=g) @ torch.randn(2, 4, generator=g)
    clow = torch.randn(4, 2, dtype=torch.complex64, generator=g) @ torch.randn(2, 5, dtype=torch.complex64, generator=g)
    return [torch.zeros(5, 5), torch.zeros(3, 5), torch.diag(torch.tensor([2.0, 0.0, 0.0, 1.0])), low, low.mT,
            clow, torch.zeros(2, 4, 4, dtype=torch.complex64), torch.stack([low, torch.zeros(6, 4)])]


@pytest.mark.parametrize("index", range(8))
@pytest.mark.parametrize("full", [False, True])
def test_svd_of_rank_deficient_matrices_has_unitary_bases(index, full, no_fallback):
    # Zero singular values: U and V must still be unitary (the Jordan-Wielandt eigenvectors of
    # the zero eigenvalue mix u and v), and U diag(S) V^H must give A back.
    a = _rank_deficient()[index]
    u, s, vh = torch.linalg.svd(a.to("tpu"), full_matrices=full)
    u_cpu, s_cpu, vh_cpu = torch.linalg.svd(a, full_matrices=full)
    assert u.shape == u_cpu.shape and vh.shape == vh_cpu.shape
    assert_close(s, s_cpu, rtol=1e-4, atol=1e-4)
    for basis in (u, vh.mH):
        eye = torch.eye(basis.shape[-1], dtype=a.dtype).expand(basis.mH.shape[:-1] + (basis.shape[-1],)).contiguous()
        assert_close(basis.mH @ basis, eye, rtol=1e-5, atol=1e-5)
    k = s.shape[-1]
    assert_close(u[..., :k] @ torch.diag_embed(s.to(a.dtype)) @ vh[..., :k, :], a, rtol=1e-5, atol=1e-5)


def test_matrix_two_norm_subgradient_at_zero_matches_cpu(no_fallback):
    # The gradient of a spectral norm at the zero matrix comes from the SVD's bases there
    # (LAPACK's and ours: the identity).
    for ord_ in (2, -2):
        check_grad(lambda t: torch.linalg.matrix_norm(t, ord_), torch.zeros(5, 5))
    u = torch.linalg.svd(torch.zeros(3, 3, device="tpu")).U
    assert_close(u, torch.eye(3))


def test_rank_and_condition_number():
    low_rank = rand(5, 2) @ rand(2, 4)
    check(torch.linalg.matrix_rank, low_rank)
    check(torch.linalg.cond, rand(4, 4))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_matches_lapack(shape, mode):
    a = rand(*shape)
    check(lambda t: torch.linalg.qr(t, mode=mode), a)
    check(torch.geqrf, a)


def rand_of(dtype, *shape):
    """Real, or complex with independent real and imaginary parts."""
    if dtype.is_complex:
        return torch.complex(rand(*shape), rand(*shape, seed=1))
    return rand(*shape, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_householder_product_and_ormqr(dtype):
    a = rand_of(dtype, 6, 4)
    packed, tau = torch.geqrf(a)
    check(torch.linalg.householder_product, packed, tau)
    for left in (True, False):
        for transpose in (False, True):  # complex: Q's conjugate transpose
            c = rand_of(dtype, 6, 3) if left else rand_of(dtype, 3, 6)
            check(lambda p, t, x: torch.ormqr(p, t, x, left=left, transpose=transpose), packed, tau, c)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("driver", [None, "gels", "gelsd", "gelss"])
def test_lstsq(driver, dtype):
    a, b = rand_of(dtype, 2, 6, 3), rand_of(dtype, 2, 6, 2)
    got, want = run_both(lambda x, y: torch.linalg.lstsq(x, y, driver=driver), a, b)
    for g, w in zip(got, want):  # residuals and singular values are real for complex A
        assert_close(g, w, rtol=1e-4, atol=1e-4)
    if dtype.is_complex and driver != "gels":  # rank-deficient: the minimum-norm solution (gels assumes full rank)
        low = rand_of(dtype, 5, 2) @ rand_of(dtype, 2, 4)
        got, want = run_both(lambda x, y: torch.linalg.lstsq(x, y, driver=driver or "gelsy"), low, rand_of(dtype, 5, 2))
        assert_close(got.solution, want.solution, rtol=1e-3, atol=1e-3)


def _ldl_cases():
    g = torch.Generator().manual_seed(11)
    real = torch.randn(4, 7, 7, generator=g)
    c = torch.randn(3, 5, 5, dtype=torch.complex64, generator=g)
    return {
        "float32 batch": (real + real.mT, False),
        "float64": ((real + real.mT).double()[0], False),
        # zero diagonal: every pivot is a 2x2 block
        "2x2 pivots": (torch.tensor([[0.0, 1, 2], [1, 0, 3], [2, 3, 0]]), False),
        "only the lower triangle is read": (torch.randn(6, 6, generator=g), False),
        "complex symmetric": (c + c.mT, False),
        "complex Hermitian": (c + c.mH, True),
        "singular": (torch.zeros(2, 3, 3), False),
    }


@pytest.mark.parametrize("case", list(_ldl_cases()))
def test_ldl_factor_and_solve_match_cpu(case, no_fallback):
    a, hermitian = _ldl_cases()[case]
    ld, piv, info = torch.linalg.ldl_factor_ex(a.to("tpu"), hermitian=hermitian)
    ld_cpu, piv_cpu, info_cpu = torch.linalg.ldl_factor_ex(a, hermitian=hermitian)
    tol = 1e-10 if a.dtype == torch.float64 else 2e-5
    assert_close(ld, ld_cpu, rtol=tol, atol=tol)
    assert torch.equal(piv.cpu(), piv_cpu) and piv.dtype == torch.int32  # the same 1x1 / 2x2 choices
    assert torch.equal(info.cpu(), info_cpu)
    if bool((info_cpu != 0).any()):
        return
    g = torch.Generator().manual_seed(12)
    rhs = torch.randn(a.shape[:-1] + (3,), dtype=a.dtype, generator=g)
    x = torch.linalg.ldl_solve(ld, piv, rhs.to("tpu"), hermitian=hermitian)
    assert_close(x, torch.linalg.ldl_solve(ld_cpu, piv_cpu, rhs, hermitian=hermitian), rtol=1e-3, atol=1e-3)


def test_ldl_solve_broadcasts_batches_and_checks_its_arguments(no_fallback):
    g = torch.Generator().manual_seed(13)
    a = torch.randn(5, 5, generator=g)
    a = a + a.mT
    ld, piv = torch.linalg.ldl_factor(a)
    rhs = torch.randn(2, 5, 4, generator=g)  # one factorization, two right-hand sides
    x = torch.linalg.ldl_solve(ld.to("tpu"), piv.to("tpu"), rhs.to("tpu"))
    assert_close(x, torch.linalg.ldl_solve(ld, piv, rhs), rtol=1e-4, atol=1e-4)
    assert_close(a.to("tpu") @ x, rhs, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="Expected pivots to be integers"):
        torch.linalg.ldl_solve(ld.to("tpu"), piv.long().to("tpu"), rhs.to("tpu"))
    for out in (None, torch.empty(0, device="tpu")):  # the out= form reaches our kernel's own checks
        with pytest.raises(RuntimeError, match="Incompatible matrix sizes"):
            torch.linalg.ldl_solve(ld.to("tpu"), piv.to("tpu"), rhs[:, :4].to("tpu"), out=out)
        with pytest.raises(RuntimeError, match="to have the same dtype"):
            torch.linalg.ldl_solve(ld.to("tpu"), piv.to("tpu"), rhs.double().to("tpu"), out=out)
