"""The deprecated torch.cholesky runs the tpu Cholesky lowering (no CPU fallback), matching the CPU."""
import pytest
import torch

import torch_tpu


def _spd(batch, n, dtype):
    a = torch.randn(*batch, n, n, dtype=dtype)
    return a @ a.mT + n * torch.eye(n, dtype=dtype)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_cholesky_matches_cpu_without_fallback(upper, batch):
    torch.manual_seed(0)
    a = _spd(batch, 4, torch.float32)
    torch_tpu.reset_fallback_counts()
    got = torch.cholesky(a.to("tpu"), upper=upper).cpu()
    assert torch_tpu.fallback_counts() == {}
    torch.testing.assert_close(got, torch.cholesky(a, upper=upper))


def test_cholesky_backward_matches_cpu():
    torch.manual_seed(1)
    a = _spd((2,), 3, torch.float64)
    x_cpu = a.clone().requires_grad_()
    x_tpu = a.to("tpu").requires_grad_()
    torch.cholesky(x_cpu).sum().backward()
    torch.cholesky(x_tpu).sum().backward()
    torch.testing.assert_close(x_tpu.grad.cpu(), x_cpu.grad)


def test_cholesky_not_positive_definite_raises_like_cpu():
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):
        torch.cholesky(-torch.eye(3))
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):
        torch.cholesky(-torch.eye(3, device="tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.complex128])
@pytest.mark.parametrize("shape,scale", [((4, 4), 0.3), ((3, 5, 5), 1.0), ((2, 3, 3), 6.0)])
def test_matrix_exp_matches_cpu_without_fallback(dtype, shape, scale):
    # scale 0.3: no squaring; 6.0: several squarings, a different count per matrix of the batch.
    torch.manual_seed(2)
    a = torch.randn(shape, dtype=dtype) * scale
    a[0] *= 0.1  # per-matrix squaring counts differ
    torch_tpu.reset_fallback_counts()
    got = torch.linalg.matrix_exp(a.to("tpu")).cpu()
    assert torch_tpu.fallback_counts() == {}
    single = dtype in (torch.float32, torch.complex64)
    torch.testing.assert_close(got, torch.linalg.matrix_exp(a), rtol=1e-4 if single else 1e-9, atol=1e-5)


def test_matrix_exp_backward_and_half_precision_match_cpu():
    torch.manual_seed(3)
    a = torch.randn(2, 3, 3, dtype=torch.float64)
    x_cpu, x_tpu = a.clone().requires_grad_(), a.to("tpu").requires_grad_()
    torch.linalg.matrix_exp(x_cpu).sum().backward()
    torch.linalg.matrix_exp(x_tpu).sum().backward()
    torch.testing.assert_close(x_tpu.grad.cpu(), x_cpu.grad)
    b = (torch.randn(3, 3) * 0.5).bfloat16()
    torch_tpu.reset_fallback_counts()
    got = torch.linalg.matrix_exp(b.to("tpu")).cpu()
    assert got.dtype == torch.bfloat16 and torch_tpu.fallback_counts() == {}
    torch.testing.assert_close(got.float(), torch.linalg.matrix_exp(b.float()), rtol=2e-2, atol=2e-2)


def test_complex_matrix_exp_backward_matches_cpu(no_fallback):
    torch.manual_seed(4)
    a = torch.randn(2, 4, 4, dtype=torch.complex128)
    x_cpu, x_tpu = a.clone().requires_grad_(), a.to("tpu").requires_grad_()
    torch.linalg.matrix_exp(x_cpu).abs().sum().backward()
    torch.linalg.matrix_exp(x_tpu).abs().sum().backward()
    torch.testing.assert_close(x_tpu.grad.cpu(), x_cpu.grad)


def test_matrix_exp_rejects_non_square():
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.matrix_exp(torch.randn(2, 3, device="tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("kwargs", [{}, {"dim": 1}, {"dim": [0, 2], "keepdim": True}, {"dim": -1, "keepdim": True}])
def test_hash_tensor_matches_cpu_without_fallback(dtype, kwargs):
    torch.manual_seed(4)
    x = (torch.randn(3, 4, 5) * 10).to(dtype)
    torch_tpu.reset_fallback_counts()
    got = torch.hash_tensor(x.to("tpu"), **kwargs).cpu()
    assert torch_tpu.fallback_counts() == {}
    expected = torch.hash_tensor(x, **kwargs)
    assert got.dtype == expected.dtype == torch.uint64
    assert torch.equal(got, expected)


def test_hash_tensor_scalar_and_bad_mode():
    x = torch.tensor(2.5)
    assert torch.equal(torch.hash_tensor(x.to("tpu")).cpu(), torch.hash_tensor(x))
    with pytest.raises(RuntimeError, match="mode"):
        torch.hash_tensor(torch.ones(3, device="tpu"), mode=1)


@pytest.mark.parametrize("storage_offset", [None, 0, 10])
def test_as_strided_of_partial_view_reads_the_base_storage(storage_offset):
    # as_strided addresses the whole storage of a view (OpInfo as_strided.partial_views).
    base = torch.arange(20, dtype=torch.float32)
    kwargs = {} if storage_offset is None else {"storage_offset": storage_offset}
    expected = torch.as_strided(base[5:15], (2, 2), (1, 2), **kwargs)
    got = torch.as_strided(base.to("tpu")[5:15], (2, 2), (1, 2), **kwargs).cpu()
    torch.testing.assert_close(got, expected)


def test_sweep_classifies_positional_mha_dropout_as_random_and_keeps_view_storage():
    from torch.testing._internal.common_methods_invocations import op_db

    from conformance import opinfo_sweep as sweep

    mha = next(o for o in op_db if o.name == "nn.functional.multi_head_attention_forward")
    name = sweep.entry_name(mha)
    seen = set()
    for sample in mha.sample_inputs("cpu", torch.float32):
        dropout = sample.args[9] > 0 and sample.kwargs.get("training", True)
        assert sweep._sample_is_random(False, sample, name) == dropout
        seen.add(dropout)
    assert seen == {True, False}
    # as_strided of a partial view runs on a tpu view of the whole storage: same values.
    partial = next(o for o in op_db if sweep.entry_name(o) == "as_strided.partial_views")
    for sample in partial.sample_inputs("cpu", torch.float32):
        assert sweep.run_sample(partial, sample, False, False)[0] == "pass"
