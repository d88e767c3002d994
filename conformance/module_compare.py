"""Comparison of tpu results with CPU results for the module sweep: every leaf must match within
dtype-aware tolerances, and a mismatch is reported with its maximum error.

The tolerances are the OpInfo sweep's (conformance/opinfo_sweep.py; float32: rtol 1.3e-5, atol
1e-4), with the absolute tolerance scaled by max(1, the largest finite |value| of the CPU
result), since module results accumulate the rounding of many ops. A half-precision leaf
outside them still passes where it is, element by element, at least as close to a float64 CPU
reference as the CPU's own half-precision result (the same exemption as the OpInfo sweep; only
forward outputs get a reference)."""

import torch
from torch.utils._pytree import tree_flatten

from conformance.opinfo_sweep import HALF_DTYPES, _at_least_as_accurate, _tolerance


def max_error(a, e):
    """'max abs err X (max rel err Y)' between two same-shaped floating tensors; NaN placement
    differences are named first."""
    a64, e64 = a.detach().double(), e.detach().double()
    nan_a, nan_e = torch.isnan(a64), torch.isnan(e64)
    if not torch.equal(nan_a, nan_e):
        return f"NaN in {int((nan_a & ~nan_e).sum())} tpu-only and {int((nan_e & ~nan_a).sum())} cpu-only elements"
    ok = ~nan_a
    if not ok.any():
        return "max abs err 0"
    diff = (a64 - e64).abs()[ok]
    diff = torch.where(torch.isnan(diff), torch.zeros_like(diff), diff)  # same infinities
    rel = diff / e64.abs()[ok].clamp_min(1e-30)
    return f"max abs err {diff.max().item():.3g} (max rel err {rel.max().item():.3g})"


def leaf_problem(a, e, random=False):
    """Why tpu leaf `a` (already on the CPU) differs from CPU leaf `e`, or None. A random leaf is
    checked for shape and dtype only."""
    if isinstance(e, torch.Tensor):
        if not isinstance(a, torch.Tensor):
            return f"expected a tensor, got {type(a).__name__}"
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(e.shape)} {e.dtype}"
        if random or a.numel() == 0:
            return None
        rtol, atol = _tolerance(torch, e.dtype)
        if e.dtype.is_floating_point:
            # Modules chain many ops (a Transformer's parameter gradients sum over layers and
            # tokens): the absolute slack grows with the tensor's magnitude.
            finite = e.detach()[torch.isfinite(e.detach())]
            atol *= max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
        try:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
        except AssertionError:
            if a.dtype.is_floating_point or a.dtype.is_complex:
                return f"{e.dtype}: {max_error(a, e)}"
            return f"{e.dtype}: {int((a != e).sum())} of {e.numel()} elements differ"
        return None
    if isinstance(e, (int, float, bool)) and not random and a != e:
        if isinstance(e, float) and isinstance(a, float) and e != e and a != a:
            return None
        return f"value {a} vs {e}"
    return None


def compare(actual, expected, what, random=False, reference=None):
    """None when the tpu results `actual` (on the CPU) match the CPU results `expected`, else
    '<what> <leaf>: <problem>' for the first differing leaf. `reference` is a zero-argument
    callable giving float64 results with the same structure (for the half-precision exemption)."""
    a_leaves, a_spec = tree_flatten(actual)
    e_leaves, e_spec = tree_flatten(expected)
    if len(a_leaves) != len(e_leaves):
        return f"{what}: structure differs: {a_spec} vs {e_spec}"
    ref_leaves = None
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        problem = leaf_problem(a, e, random)
        if problem is None:
            continue
        half = isinstance(e, torch.Tensor) and str(e.dtype).replace("torch.", "") in HALF_DTYPES
        if half and reference is not None and isinstance(a, torch.Tensor) and a.shape == e.shape:
            if ref_leaves is None:
                try:
                    ref_leaves = tree_flatten(reference())[0]
                except Exception:
                    ref_leaves = []
            if len(ref_leaves) == len(e_leaves) and _at_least_as_accurate(torch, a, e, ref_leaves[i]):
                continue
        label = what if len(e_leaves) == 1 else f"{what} {_leaf_name(expected, i)}"
        return f"{label}: {problem}"
    return None


def _leaf_name(tree, index):
    """Where leaf `index` sits in `tree`, e.g. ['params']['linear1.weight'] or [0][1]."""
    from torch.utils._pytree import keystr, tree_flatten_with_path

    try:
        return keystr(tree_flatten_with_path(tree)[0][index][0]) or f"#{index}"
    except Exception:
        return f"#{index}"
