"""Ops that group or count values - unique (flat and along a dim), unique_consecutive,
histogram, segment_reduce, searchsorted with a scalar - compared with the CPU."""

import pytest
import torch

from helpers import assert_close, run_both


@pytest.fixture(autouse=True)
def _no_fallback(no_fallback):
    yield


def assert_all_close(got, want, **tol):
    for g, w in zip(got, want):
        assert_close(g, w, **tol)


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_unique(dim):
    x = torch.tensor([[3, 1, 3, 1], [2, 2, 0, 2], [3, 1, 3, 1], [0, 5, 0, 5]])
    fn = lambda t: torch.unique(t, sorted=True, return_inverse=True, return_counts=True, dim=dim)  # noqa: E731
    assert_all_close(*run_both(fn, x))
    assert_all_close(*run_both(fn, x.float() / 2))


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_unique_consecutive(dim):
    x = torch.tensor([[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 3, 3], [1, 1, 2, 2]])
    fn = lambda t: torch.unique_consecutive(t, return_inverse=True, return_counts=True, dim=dim)  # noqa: E731
    assert_all_close(*run_both(fn, x))


def test_unique_of_no_slices():
    x = torch.empty(0, 3)
    got, want = run_both(lambda t: torch.unique(t, dim=0, return_inverse=True, return_counts=True), x)
    assert_all_close(got, want)


@pytest.mark.parametrize("density", [False, True])
def test_histogram(density):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1000, generator=g)
    w = torch.rand(1000, generator=g)
    assert_all_close(*run_both(lambda t: torch.histogram(t, bins=7, density=density), x), rtol=1e-5, atol=1e-6)
    assert_all_close(*run_both(lambda t, v: torch.histogram(t, bins=5, range=(-1.0, 2.0), weight=v, density=density), x, w),
                     rtol=1e-5, atol=1e-5)
    edges = torch.tensor([-3.0, -0.5, 0.0, 0.1, 4.0])
    assert_all_close(*run_both(lambda t, e: torch.histogram(t, e, density=density), x, edges), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduce", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize("initial", [None, 2.5])
def test_segment_reduce(reduce, initial):
    data = torch.arange(1.0, 13.0).reshape(6, 2) / 3
    lengths = torch.tensor([2, 0, 3, 1])
    fn = lambda d, l: torch.segment_reduce(d, reduce, lengths=l, initial=initial)  # noqa: E731
    assert_close(*run_both(fn, data, lengths))
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    fn = lambda d, o: torch.segment_reduce(d, reduce, offsets=o, initial=initial)  # noqa: E731
    assert_close(*run_both(fn, data, offsets))


def test_searchsorted_scalar_and_tensor_split_indices():
    seq = torch.tensor([1.0, 3.0, 5.0, 7.0])
    for right in (False, True):
        assert_close(*run_both(lambda s: torch.searchsorted(s, 5.0, right=right), seq))
    x = torch.arange(10.0)
    got, want = run_both(lambda t: torch.tensor_split(t, torch.tensor([2, 7])), x)  # indices stay on the host
    assert_all_close(got, want)
