"""torch.histogramdd on tpu (_histogramdd_bin_edges, _histogramdd_from_bin_cts,
_histogramdd_from_bin_tensors): every result is compared with the same call on the CPU, with no
CPU fallback; bad input raises PyTorch's own errors."""

import pytest
import torch

import torch_tpu  # noqa: F401
from tests.helpers import assert_close


def _histogramdd_both(x, bins, weight=None, **kwargs):
    """torch.histogramdd on the tpu and on the CPU; bins may be ints or a list of edge tensors."""
    def on(device):
        b = [e.to(device) for e in bins] if isinstance(bins, list) and isinstance(bins[0], torch.Tensor) else bins
        w = None if weight is None else weight.to(device)
        return torch.histogramdd(x.to(device), bins=b, weight=w, **kwargs)

    return on("tpu"), on("cpu")


def _assert_same(tpu_result, cpu_result):
    assert_close(tpu_result.hist, cpu_result.hist)
    assert len(tpu_result.bin_edges) == len(cpu_result.bin_edges)
    for e_tpu, e_cpu in zip(tpu_result.bin_edges, cpu_result.bin_edges):
        assert_close(e_tpu, e_cpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,bins", [((40, 2), [3, 5]), ((4, 6, 3), [2, 3, 4]), ((30, 1), 7), ((3, 5, 2), 1)])
@pytest.mark.parametrize("weighted,density", [(False, False), (True, False), (True, True), (False, True)])
def test_bin_counts_match_cpu(dtype, shape, bins, weighted, density, no_fallback):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g, dtype=dtype) * 4
    weight = torch.rand(shape[:-1], generator=g, dtype=dtype) if weighted else None
    _assert_same(*_histogramdd_both(x, bins, weight, density=density))


@pytest.mark.parametrize("density", [False, True])
def test_range_ignores_outside_points_and_closes_last_bin(density, no_fallback):
    # Points on every edge, on the last edge, and outside the range.
    x = torch.tensor([[0.0, 0.0], [1.0, 2.0], [0.5, 1.0], [-0.1, 1.0], [0.5, 2.1], [1.0, 0.0], [0.25, 0.5]])
    _assert_same(*_histogramdd_both(x, [4, 2], range=[0.0, 1.0, 0.0, 2.0], density=density))


def test_degenerate_span_is_widened(no_fallback):
    # A constant dimension (min == max) gets edges [v - 0.5, v + 0.5], as in PyTorch.
    x = torch.stack([torch.full((9,), 2.5), torch.arange(9.0)], dim=1)
    _assert_same(*_histogramdd_both(x, [3, 3]))
    _assert_same(*_histogramdd_both(x, [2, 2], range=[1.0, 1.0, 0.0, 8.0]))


@pytest.mark.parametrize("sorted_edges", [True, False])
@pytest.mark.parametrize("weighted,density", [(False, False), (True, True)])
def test_bin_tensors_match_cpu(sorted_edges, weighted, density, no_fallback):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(25, 3, generator=g) * 3
    edges = [torch.randn(n, generator=g) * 3 for n in (2, 4, 6)]
    if sorted_edges:
        edges = [e.sort().values for e in edges]
    # Unsorted edges are allowed by PyTorch (no check); the CPU's binary search bins them, and
    # the tpu must give the same bins (OpInfo's samples use random edges).
    weight = torch.rand(25, generator=g) if weighted else None
    _assert_same(*_histogramdd_both(x, edges, weight, density=density))


def test_bin_tensors_float64_and_points_on_edges(no_fallback):
    x = torch.tensor([[0.0, 1.0], [1.0, 3.0], [2.0, 2.0], [3.0, 3.0], [2.5, 4.0]], dtype=torch.float64)
    edges = [torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64), torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)]
    _assert_same(*_histogramdd_both(x, edges))


@pytest.mark.parametrize("density", [False, True])
def test_empty_input_matches_cpu(density, no_fallback):
    x = torch.empty(4, 0, 2)
    _assert_same(*_histogramdd_both(x, [2, 3], density=density))
    _assert_same(*_histogramdd_both(x, [2, 3], range=[-1.0, 1.0, 0.0, 3.0], density=density))


def test_out_variants_match_cpu(no_fallback):
    x = torch.randn(12, 2) * 2
    hist_out = torch.empty(0, device="tpu")
    torch.ops.aten._histogramdd_from_bin_cts.out(x.to("tpu"), [3, 2], out=hist_out)
    assert_close(hist_out, torch.ops.aten._histogramdd_from_bin_cts(x, [3, 2]))
    edges = [torch.tensor([-1.0, 0.0, 2.0]), torch.tensor([-3.0, 3.0])]
    torch.ops.aten._histogramdd_from_bin_tensors.out(x.to("tpu"), [e.to("tpu") for e in edges], out=hist_out)
    assert_close(hist_out, torch.ops.aten._histogramdd_from_bin_tensors(x, edges))
    edges_out = [torch.empty(0, device="tpu") for _ in range(2)]
    torch.ops.aten._histogramdd_bin_edges.out(x.to("tpu"), [3, 4], out=edges_out)
    for e_tpu, e_cpu in zip(edges_out, torch.ops.aten._histogramdd_bin_edges(x, [3, 4])):
        assert_close(e_tpu, e_cpu)


def _bad_inputs():
    x = torch.rand(5, 2)
    e = torch.tensor([0.0, 0.5, 1.0])
    return [
        ("wrong bin count", lambda d: torch.histogramdd(x.to(d), bins=[3])),
        ("wrong bin count (ops)", lambda d: torch.ops.aten._histogramdd_from_bin_cts(x.to(d), [1, 1, 1])),
        ("zero bins", lambda d: torch.histogramdd(x.to(d), bins=[3, 0])),
        ("negative bins", lambda d: torch.histogramdd(x.to(d), bins=[3, -2])),
        ("range min > max", lambda d: torch.histogramdd(x.to(d), bins=[3, 3], range=[1.0, 0.0, 0.0, 1.0])),
        ("range length", lambda d: torch.histogramdd(x.to(d), bins=[3, 3], range=[0.0, 1.0])),
        ("range not finite", lambda d: torch.histogramdd(x.to(d), bins=2, range=[0.0, float("inf"), 0.0, 1.0])),
        ("nan input", lambda d: torch.histogramdd(torch.tensor([[float("nan"), 1.0]]).to(d), bins=2)),
        ("weight shape", lambda d: torch.histogramdd(x.to(d), bins=[3, 3], weight=torch.ones(4).to(d))),
        ("weight dtype", lambda d: torch.histogramdd(x.to(d), bins=2, weight=torch.ones(5, dtype=torch.float64).to(d))),
        ("1-d input", lambda d: torch.histogramdd(x[0].to(d), bins=[3, 3])),
        ("int input", lambda d: torch.histogramdd(x.int().to(d), bins=2)),
        ("edge count", lambda d: torch.histogramdd(x.to(d), bins=[e.to(d)])),
        ("edges 2-d", lambda d: torch.histogramdd(x.to(d), bins=[e.to(d), torch.ones(2, 2).to(d)])),
        ("edges empty", lambda d: torch.histogramdd(x.to(d), bins=[e.to(d), torch.ones(0).to(d)])),
        ("edges single", lambda d: torch.histogramdd(x.to(d), bins=[e.to(d), torch.ones(1).to(d)])),
        ("edges dtype", lambda d: torch.histogramdd(x.to(d), bins=[e.to(d), e.double().to(d)])),
    ]


@pytest.mark.parametrize("name,call", _bad_inputs(), ids=[name for name, _ in _bad_inputs()])
def test_bad_input_raises_cpu_error(name, call):
    with pytest.raises(RuntimeError) as cpu_error:
        call("cpu")
    with pytest.raises(RuntimeError) as tpu_error:
        call("tpu")
    assert str(tpu_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0], name
    # The same exception class too (an unsupported dtype is a NotImplementedError on the CPU).
    assert type(tpu_error.value) is type(cpu_error.value), (name, tpu_error.value, cpu_error.value)


def test_histogram_1d_unsorted_edges_match_cpu(no_fallback):
    # torch.histogram shares histogramdd's binning rules: unsorted edges bin as on the CPU.
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        x, edges, weight = torch.randn(30, generator=g) * 3, torch.randn(5, generator=g) * 3, torch.rand(30, generator=g)
        hist_tpu, edges_tpu = torch.histogram(x.to("tpu"), edges.to("tpu"), weight=weight.to("tpu"))
        hist_cpu, edges_cpu = torch.histogram(x, edges, weight=weight)
        assert_close(hist_tpu, hist_cpu)
        assert_close(edges_tpu, edges_cpu)
