"""Backward ops that used to fall back to the CPU (csrc/aten/grad_composites.cc, unique_ops.cc):
unfold's, cdist's and pdist's backward, autograd's known-zero gradients and the unique that
index_fill's backward uses - each gradient compared with CPU autograd, with no fallback."""

import pytest
import torch

import torch_tpu  # noqa: F401
from helpers import assert_close


def _grads(fn, *inputs, seed=0):
    """fn's input gradients on the CPU and on tpu for one random upstream gradient."""
    out = fn(*inputs)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    cpu = torch.autograd.grad(out, inputs, upstream)
    moved = [x.detach().to("tpu").requires_grad_() for x in inputs]
    tpu = torch.autograd.grad(fn(*moved), moved, upstream.to("tpu"))
    return cpu, tpu


def _check(fn, *inputs, tol=1e-5):
    cpu, tpu = _grads(fn, *inputs)
    for c, t in zip(cpu, tpu):
        assert_close(t, c, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape,dim,size,step", [((7,), 0, 3, 2), ((4, 9), 1, 4, 1), ((6, 3), 0, 2, 3),
                                                 ((5, 4), -1, 4, 4)])
def test_unfold_backward(shape, dim, size, step, no_fallback):
    x = torch.randn(shape, requires_grad=True)
    _check(lambda t: t.unfold(dim, size, step), x)


@pytest.mark.parametrize("p", [0.0, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_cdist_and_pdist_backward(p, no_fallback):
    g = torch.Generator().manual_seed(1)
    x1 = torch.randn(2, 5, 3, generator=g, requires_grad=True)
    x2 = torch.randn(1, 4, 3, generator=g, requires_grad=True)  # broadcast batch
    _check(lambda a, b: torch.cdist(a, b, p=p), x1, x2, tol=1e-4)
    x = torch.randn(6, 4, generator=g)
    x[3] = x[1]  # a zero distance: its gradient is 0, as in ATen
    x.requires_grad_()
    _check(lambda a: torch.nn.functional.pdist(a, p=p), x, tol=1e-4)


def test_known_zero_and_index_fill_gradients(no_fallback):
    x = torch.randn(4, 5, requires_grad=True)
    _check(lambda t: torch.sgn(t) + t, x)  # sgn's gradient of real input: autograd's zero tensor
    index = torch.tensor([3, 0, 3])
    _check(lambda t: t.index_fill(1, index.to(t.device), -1.0) * 2, x)
