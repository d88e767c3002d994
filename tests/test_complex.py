"""complex64/complex128 on tpu: storage and transfers, views between complex and real storage,
conjugation (lazy conj bit), elementwise math, reductions, matmul, autograd and the rotary
embedding of torchtitan's Llama 3 - each compared with the same computation on the CPU."""

import warnings

import pytest
import torch

import torch_tpu
from helpers import assert_close

TOL = {torch.complex64: (1e-5, 1e-5), torch.complex128: (1e-12, 1e-12),
       torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12)}
CDTYPES = [torch.complex64, torch.complex128]


def close(tpu, cpu, scale=1.0):
    rtol, atol = TOL[cpu.dtype]
    assert_close(tpu, cpu, rtol=rtol * scale, atol=atol * scale)


def sample(dtype=torch.complex64, shape=(4, 6), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_transfers_round_trip(dtype, no_fallback):
    x = sample(dtype)
    t = x.to("tpu")
    assert t.dtype == dtype and t.device.type == "tpu"
    assert torch.equal(t.cpu(), x)
    assert torch.equal(t[1:3, ::2].cpu(), x[1:3, ::2])  # strided view of a complex storage
    assert torch.equal(t.to("tpu:1").cpu(), x)
    dst = torch.zeros(4, 6, dtype=dtype, device="tpu")
    dst[:, 1].copy_(x[:, 0])  # host -> device view
    expected = torch.zeros(4, 6, dtype=dtype)
    expected[:, 1] = x[:, 0]
    assert torch.equal(dst.cpu(), expected)
    assert t[2, 3].item() == x[2, 3].item()


def test_dtype_conversions(no_fallback):
    r = torch.randn(3, 5)
    close(r.to("tpu").to(torch.complex64), r.to(torch.complex64))
    close(r.to("tpu").to(torch.complex128), r.to(torch.complex128))
    z = sample()
    close(z.to("tpu").to(torch.complex128), z.to(torch.complex128))
    with warnings.catch_warnings():  # ATen warns once per process that the imaginary part goes
        warnings.simplefilter("ignore")
        real = z.to("tpu").to(torch.float32)
    close(real, z.real.contiguous())


@pytest.mark.parametrize("dtype", CDTYPES)
def test_view_as_real_and_complex_share_storage(dtype, no_fallback):
    x = sample(dtype)
    t = x.to("tpu")
    r = torch.view_as_real(t)
    close(r, torch.view_as_real(x))
    assert r.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    r[..., 1] = 0.0  # writes through the real view reach the complex tensor
    x_expected = x.clone()
    torch.view_as_real(x_expected)[..., 1] = 0.0
    close(t, x_expected)
    pairs = torch.randn(5, 3, 2, dtype=torch.float64 if dtype == torch.complex128 else torch.float32)
    p = pairs.to("tpu")
    c = torch.view_as_complex(p)
    close(c, torch.view_as_complex(pairs))
    c.mul_(2j)  # in-place complex op through the complex view of real storage
    expected = pairs.clone()
    torch.view_as_complex(expected).mul_(2j)
    close(p, expected)
    close(t.real, x_expected.real)
    close(t.imag, x_expected.imag)


def test_conj_bit_and_physical_conj(no_fallback):
    x = sample()
    t = x.to("tpu")
    c = t.conj()
    assert c.is_conj()
    close(c, x.conj())  # transfer resolves the lazy bit
    close(c.resolve_conj(), x.conj().resolve_conj())
    close(torch.conj_physical(t), torch.conj_physical(x))
    close(c * t, x.conj() * x)
    close(c.imag, x.conj().imag)  # a negative-bit view
    y = t.clone()
    y.conj().copy_(x)  # writing through a conjugate view
    close(y, x.conj())
    assert c[1, 2].item() == x.conj()[1, 2].item()


@pytest.mark.parametrize("dtype", CDTYPES)
def test_elementwise_math(dtype, no_fallback):
    x, y = sample(dtype, seed=1), sample(dtype, seed=2)
    tx, ty = x.to("tpu"), y.to("tpu")
    close(tx + ty, x + y)
    close(tx - 2 * ty, x - 2 * y)
    close(tx * ty, x * y)
    close(tx / ty, x / y, scale=10)
    close(tx * (1 - 2j) + 0.5j, x * (1 - 2j) + 0.5j)
    for fn in (torch.exp, torch.log, torch.sqrt, torch.rsqrt, torch.sin, torch.cos, torch.tanh,
               torch.reciprocal, torch.neg):
        close(fn(tx), fn(x), scale=10)
    close(tx.abs(), x.abs())
    close(tx.angle(), x.angle())
    close(torch.sgn(tx), torch.sgn(x))
    close(torch.where(tx.real > 0, tx, ty), torch.where(x.real > 0, x, y))


def test_mixed_real_complex_promotion(no_fallback):
    z, r = sample(), torch.randn(4, 6)
    close(z.to("tpu") * r.to("tpu"), z * r)
    close(r.to("tpu") + z.to("tpu"), r + z)
    close(z.to("tpu") + r.to(torch.float64).to("tpu"), z + r.to(torch.float64))


def test_complex_and_polar(no_fallback):
    re, im = torch.randn(3, 4), torch.randn(4)
    close(torch.complex(re.to("tpu"), im.to("tpu")), torch.complex(re, im))
    mag, ang = torch.rand(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    close(torch.polar(mag.to("tpu"), ang.to("tpu")), torch.polar(mag, ang))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_reductions_and_matmul(dtype, no_fallback):
    x, y = sample(dtype, (3, 4, 5), seed=3), sample(dtype, (3, 5, 2), seed=4)
    tx, ty = x.to("tpu"), y.to("tpu")
    close(tx.sum(), x.sum(), scale=10)
    close(tx.sum(dim=1), x.sum(dim=1), scale=10)
    close(tx.mean(dim=(0, 2)), x.mean(dim=(0, 2)), scale=10)
    close(tx @ ty, x @ y, scale=10)
    close(tx[0] @ ty[0], x[0] @ y[0], scale=10)
    close(tx[0].mH @ tx[0], x[0].mH @ x[0], scale=10)  # a conj-bit operand of matmul
    close(torch.cat([tx, tx.conj()], dim=1), torch.cat([x, x.conj()], dim=1))


def test_autograd_complex_grads(no_fallback):
    x = sample(seed=5)
    a = x.clone().requires_grad_()
    b = x.to("tpu").requires_grad_()
    for v in (a, b):
        (v * v.conj() * v.exp() + v.sin() / (v + 3)).abs().sum().backward()
    close(b.grad, a.grad, scale=10)
    # a real leaf through complex intermediates
    r = torch.randn(4, 6)
    ra = r.clone().requires_grad_()
    rb = r.to("tpu").requires_grad_()
    for v in (ra, rb):
        z = torch.polar(torch.ones_like(v), v) * torch.complex(v, v * 2)
        torch.view_as_real(z).pow(2).sum().backward()
    close(rb.grad, ra.grad, scale=10)


def _rotary(xq, freqs_cis):
    # torchtitan's Llama 3 apply_rotary_emb (one of its two inputs)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    return torch.view_as_real(xq_ * freqs_cis).flatten(3).type_as(xq)


def _freqs(dim, end, device):
    freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=device)[: dim // 2].float() / dim))
    t = torch.arange(end, device=device).float()
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def test_llama3_rotary_embedding_forward_backward_without_fallback(no_fallback):
    torch_tpu.set_fallback_mode("error")
    try:
        g = torch.Generator().manual_seed(7)
        xq = torch.randn(2, 8, 3, 16, generator=g)
        a = xq.clone().requires_grad_()
        b = xq.to("tpu").requires_grad_()
        out_cpu = _rotary(a, _freqs(16, 8, "cpu"))
        out_tpu = _rotary(b, _freqs(16, 8, "tpu"))
        close(out_tpu, out_cpu)
        w = torch.randn(out_cpu.shape, generator=g)
        (out_cpu * w).sum().backward()
        (out_tpu * w.to("tpu")).sum().backward()
        close(b.grad, a.grad)
    finally:
        torch_tpu.set_fallback_mode("warn")


def test_ops_without_complex_support_fail_clearly_or_fall_back():
    z = sample()
    t = z.to("tpu")
    # a lowering written for real values refuses complex inputs instead of computing garbage
    with pytest.raises(NotImplementedError, match="does not support complex tensors on tpu"):
        torch.nn.functional.avg_pool1d(t[None], 2)
    # pointwise ops without complex support run on the CPU with the usual warning
    torch_tpu.reset_fallback_counts()
    close(torch.nan_to_num(t), torch.nan_to_num(z))
    assert torch_tpu.fallback_counts() == {"aten::nan_to_num.out": 1}


def _log_add_exp_operands():
    """Pairs with equal, infinite and NaN real parts, where ATen's complex log-add-exp orders
    the operands by their real parts."""
    x, y = sample(shape=(3, 8)), sample(shape=(3, 8), seed=1)
    inf, nan = float("inf"), float("nan")
    x[0, :6] = torch.tensor([complex(-inf, 1), complex(inf, 1), complex(nan, 1), complex(inf, 0), 2 + 1j, complex(-inf, 3)])
    y[0, :6] = torch.tensor([complex(-inf, 2), complex(inf, 2), 1 + 1j, 3 - 1j, 2 - 1j, 0.5 + 2j])
    return x, y


def test_logaddexp_logcumsumexp_renorm_match_cpu(no_fallback):
    x, y = _log_add_exp_operands()
    xt, yt = x.to("tpu"), y.to("tpu")
    close(torch.logaddexp(xt, yt), torch.logaddexp(x, y))
    for dim in (0, 1):  # running values reach -inf + bj, +inf + bj and NaN along dim 1
        close(torch.logcumsumexp(xt, dim), torch.logcumsumexp(x, dim))
    # Large imaginary parts: the result's imaginary part is the CPU's branch of the logarithm
    # (ATen absorbs one element at a time), not another multiple of 2 pi.
    g = torch.Generator().manual_seed(3)
    wide = torch.complex(torch.rand(5, 5, 5, generator=g) * 18 - 9, torch.rand(5, 5, 5, generator=g) * 18 - 9)
    for dim in (0, 1, 2):
        close(torch.logcumsumexp(wide.to("tpu"), dim), torch.logcumsumexp(wide, dim))
    for p, dim, maxnorm in ((2.0, 0, 1.0), (1.0, 1, 0.5), (float("inf"), 1, 0.7)):
        close(torch.renorm(yt, p, dim, maxnorm), torch.renorm(y, p, dim, maxnorm))
    a = sample(shape=(3, 5)).requires_grad_()
    at = a.detach().to("tpu").requires_grad_()
    for f in (lambda v: torch.logcumsumexp(v, 1), lambda v: torch.logaddexp(v, 2 * v), lambda v: torch.renorm(v, 2, 0, 1.0)):
        g_cpu, = torch.autograd.grad(f(a).abs().sum(), a)
        g_tpu, = torch.autograd.grad(f(at).abs().sum(), at)
        close(g_tpu, g_cpu, scale=10)


def _with_special_values():
    """Parts that are zero, infinite or NaN on one side only."""
    z = sample(shape=(3, 4))
    z[0, 0] = complex(0.0, 2.0)
    z[0, 1] = complex(0.0, 0.0)
    z[1, 0] = complex(1.0, float("inf"))
    z[1, 1] = complex(float("-inf"), 0.5)
    z[2, 0] = complex(0.0, float("nan"))
    return z


def test_truth_and_special_value_tests_look_at_both_parts(no_fallback):
    """Were silently wrong: complex -> bool kept only the real part, compares of complex values
    did not compile, isinf/isfinite ignored complex inputs."""
    z = _with_special_values()
    t = z.to("tpu")
    for fn in (lambda x: x.bool(), lambda x: x.to(torch.bool), torch.logical_not, torch.isinf, torch.isfinite,
               torch.isnan, lambda x: x == x[0:1], lambda x: x != 0, lambda x: torch.logical_and(x, x.flip(0)),
               lambda x: torch.all(x, dim=1), lambda x: torch.any(x, dim=0), torch.nonzero, torch.count_nonzero):
        assert torch.equal(fn(t).cpu(), fn(z))


def test_newly_supported_ops_match_the_cpu(no_fallback):
    z, w = sample(seed=2), sample(seed=3)
    t, u = z.to("tpu"), w.to("tpu")
    index = torch.tensor([0, 2, 3])
    for fn in (torch.tril, torch.triu, lambda x: torch.prod(x, 1), lambda x: torch.cumsum(x, 1),
               lambda x: torch.cumprod(x, 0), torch.sigmoid, torch.tan, torch.asin, torch.atanh, torch.sinh,
               torch.log1p, torch.expm1, torch.exp2, torch.log10, lambda x: x.pow(3), lambda x: x.pow(0.5),
               torch.square, lambda x: torch.masked_select(x, x.real > 0),
               lambda x: x.index_put((index.to(x.device),), x[:3] * 2, accumulate=True),
               lambda x: x.scatter_add(0, torch.zeros_like(x.real, dtype=torch.long), x),
               lambda x: torch.nn.functional.pad(x[None], (2, 1), mode="replicate")):
        close(fn(t), fn(z))
    close(torch.lerp(t, u, 0.3), torch.lerp(z, w, 0.3))
    close(torch.lerp(t, u, u * 0.1), torch.lerp(z, w, w * 0.1))
    close(torch.addcmul(t, t, u, value=0.5), torch.addcmul(z, z, w, value=0.5))
    close(torch.logsumexp(t, 1), torch.logsumexp(z, 1))


def test_variance_and_norms_are_real(no_fallback):
    z = sample(shape=(5, 6), seed=4)
    t = z.to("tpu")
    for fn in (lambda x: torch.var(x, 1), lambda x: torch.std(x, 0, correction=0), torch.linalg.vector_norm,
               lambda x: torch.linalg.vector_norm(x, float("inf"), dim=1), lambda x: torch.linalg.norm(x, dim=0),
               lambda x: torch.dist(x, x.flip(1))):
        got, expected = fn(t), fn(z)
        assert got.dtype == expected.dtype == torch.float32
        close(got, expected)
    (var, mean), (ref_var, ref_mean) = torch.var_mean(t, 1, keepdim=True), torch.var_mean(z, 1, keepdim=True)
    close(var, ref_var)
    close(mean, ref_mean)


def test_vdot_conjugates_and_complex_scalars_scale_products(no_fallback):
    """vdot was silently dot; addmm with a complex alpha or beta raised an int64 overflow."""
    a, b = sample(shape=(7,), seed=5), sample(shape=(7,), seed=6)
    close(torch.vdot(a.to("tpu"), b.to("tpu")), torch.vdot(a, b))
    close(torch.linalg.vecdot(a.to("tpu"), b.to("tpu")), torch.linalg.vecdot(a, b))
    m, x, y = sample(shape=(3, 4), seed=7), sample(shape=(3, 5), seed=8), sample(shape=(5, 4), seed=9)
    got = torch.addmm(m.to("tpu"), x.to("tpu"), y.to("tpu"), beta=0.5 - 1j, alpha=2 + 0.25j)
    close(got, torch.addmm(m, x, y, beta=0.5 - 1j, alpha=2 + 0.25j))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_lu_based_linear_algebra(dtype, no_fallback):
    """LU with LAPACK's complex pivoting (|re| + |im|), solves with adjoints, det/slogdet/inv."""
    a = sample(dtype, shape=(2, 4, 4), seed=10) + 2 * torch.eye(4, dtype=dtype)
    b = sample(dtype, shape=(2, 4, 3), seed=11)
    ta, tb = a.to("tpu"), b.to("tpu")
    lu, piv = torch.linalg.lu_factor(ta)
    ref_lu, ref_piv = torch.linalg.lu_factor(a)
    close(lu, ref_lu, 10)
    assert torch.equal(piv.cpu(), ref_piv)
    for adjoint in (False, True):
        close(torch.linalg.lu_solve(lu, piv, tb, adjoint=adjoint), torch.linalg.lu_solve(ref_lu, ref_piv, b, adjoint=adjoint), 10)
        close(torch.linalg.lu_solve(lu, piv, tb.mT, left=False, adjoint=adjoint),
              torch.linalg.lu_solve(ref_lu, ref_piv, b.mT, left=False, adjoint=adjoint), 10)
    close(torch.linalg.solve(ta, tb), torch.linalg.solve(a, b), 10)
    close(torch.linalg.inv(ta), torch.linalg.inv(a), 10)
    close(torch.linalg.det(ta), torch.linalg.det(a), 10)
    sign, logabs = torch.linalg.slogdet(ta)
    ref_sign, ref_logabs = torch.linalg.slogdet(a)
    assert logabs.dtype == ref_logabs.dtype
    close(sign, ref_sign, 10)
    close(logabs, ref_logabs, 10)
    tri = torch.triu(a)
    for transpose in (False, True):  # torch.triangular_solve transposes without conjugating
        close(torch.triangular_solve(tb, tri.to("tpu"), transpose=transpose)[0],
              torch.triangular_solve(b, tri, transpose=transpose)[0], 10)
    low = torch.tril(a)
    close(torch.cholesky_solve(tb, low.to("tpu")), torch.cholesky_solve(b, low), 100)


def test_hermitian_and_orthogonal_decompositions(no_fallback):
    """eigh, Cholesky, QR and SVD of complex matrices, checked through what they reconstruct
    (their vectors are defined only up to phases) and their real spectra against the CPU."""
    z = sample(shape=(2, 5, 5), seed=12)
    h = z @ z.mH + 5 * torch.eye(5, dtype=z.dtype)  # Hermitian positive definite
    th = h.to("tpu")
    w, v = torch.linalg.eigh(th)
    assert w.dtype == torch.float32
    close(w, torch.linalg.eigvalsh(h), 10)
    close((v * w.to(v.dtype).unsqueeze(-2)) @ v.mH, h, 10)
    for upper in (False, True):
        f = torch.linalg.cholesky(th, upper=upper)
        close(f, torch.linalg.cholesky(h, upper=upper), 10)
    a = sample(shape=(2, 6, 4), seed=13)
    q, r = torch.linalg.qr(a.to("tpu"))
    close(q @ r, a, 10)
    close(q.mH @ q, torch.eye(4, dtype=a.dtype).expand(2, 4, 4), 10)
    u, s, vh = torch.linalg.svd(a.to("tpu"), full_matrices=True)
    assert s.dtype == torch.float32
    close(s, torch.linalg.svdvals(a), 10)
    close(u[..., :4] @ torch.diag_embed(s).to(a.dtype) @ vh, a, 10)
    close(u.mH @ u, torch.eye(6, dtype=a.dtype).expand(2, 6, 6), 10)
    close(torch.linalg.pinv(a.to("tpu")), torch.linalg.pinv(a), 100)
