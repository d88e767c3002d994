"""PyTorch's NaN, +-Inf and signed-zero rules on the tpu device, op family by op family: every
op runs on tpu and on the CPU over inputs that mix NaN, +Inf, -Inf, -0.0 and +0.0 with ordinary
values (rows with and without NaN, an all-NaN row, ties), and the results must agree.

How results are compared (one rule per output kind, chosen per op in the table below):

* Values: equal with NaN == NaN (exact for ops that select an element, dtype tolerance for ops
  that compute, e.g. nanmean). Sign bits of zeros are compared wherever PyTorch's CPU result is
  deterministic. They are not compared where a zero result was chosen between -0.0 and +0.0
  (amax of a slice holding both, maximum(-0.0, +0.0), clamp with a zero bound): IEEE leaves
  that choice open and ATen's CPU kernels make it differently in their vectorised and scalar
  loops (torch.maximum on the CPU returns +0.0 at one position and -0.0 at another for the same
  operand pair), so there is no single answer to match.
* Indices, "exact": the ops whose tie rule PyTorch fixes - max/min(dim) and argmax/argmin (the
  first extreme, the first NaN), cummax/cummin (the last), stable sort - must return CPU's
  indices. Values selected by an index must then carry the selected element's sign too.
* Indices, "selected": topk, kthvalue, median, nanmedian, mode and unstable sort pick among
  equal elements by CPU implementation details (nth_element, partial sort, an unstable
  std::sort), so the index must point at an element equal to the returned value (sign bit
  included), and must equal CPU's index wherever the value occurs once in its slice (NaN
  counting as equal to NaN); where PyTorch fixes the NaN index (median: the first NaN) it must
  match too.

mode on slices holding NaN is not compared: ATen's CPU kernel sorts with `<`, which is not a
strict weak order with NaN, so its answer there is an artifact of std::sort's internals (each
NaN counts as its own value, and NaNs stop insertion sort from moving elements past them).
"""

import math

import pytest
import torch

import torch_tpu
from torch_tpu.execution_mode import EagerMode, mode

NAN, INF = math.nan, math.inf
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]

# Rows: ordinary values; NaNs among others; infinities and signed zeros; ties; all NaN;
# signed zeros only.
SPECIAL_ROWS = [
    [1.5, -2.0, 3.0, 0.5, -0.25, 2.0],
    [1.0, NAN, 3.0, -INF, 2.0, NAN],
    [0.0, -0.0, INF, -INF, 0.0, -0.0],
    [2.0, 2.0, -1.0, -1.0, 2.0, -1.0],
    [NAN, NAN, NAN, NAN, NAN, NAN],
    [-0.0, 0.0, -0.0, 0.0, -0.0, 0.0],
]
NAN_FREE_ROWS = [0, 2, 3, 5]


def special(dtype):
    """6x6: one row per rule above (its columns mix the rules too)."""
    return torch.tensor(SPECIAL_ROWS, dtype=dtype)


def scattered(dtype):
    """3x4x5 small integers (many ties) with NaN, +-Inf and signed zeros at seeded positions and
    one all-NaN line along the last dim."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (3, 4, 5), generator=gen).double()
    flat = x.view(-1)
    picks = torch.randperm(flat.numel(), generator=gen)
    flat[picks[:7]] = NAN
    flat[picks[7:11]] = INF
    flat[picks[11:15]] = -INF
    flat[picks[15:20]] = -0.0
    x[2, 1, :] = NAN
    return x.to(dtype)


def long_rows(dtype):
    """3x37 (CPU kernels run vectorised loops and a scalar tail): a NaN first, a negative NaN
    and a NaN in the tail, and a NaN-free row with +-Inf and signed zeros."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(-5, 6, (3, 37), generator=gen).double()
    x[0, 0] = NAN
    x[1, 35] = NAN
    x[1, 4] = -NAN  # a NaN with its sign bit set
    x[2, [3, 20]] = INF
    x[2, [7, 33]] = -INF
    x[2, [1, 30]] = -0.0
    return x.to(dtype)


# (input name, tensor maker, [(dim, keepdim), ...]). float32 runs all of them; the other
# dtypes run the first (every rule is in it) once, to keep the number of compiles down.
INPUTS = [
    ("special", special, [(0, False), (1, True), (-1, False)]),
    ("nan_free", lambda dt: special(dt)[NAN_FREE_ROWS], [(0, True), (1, False)]),
    ("scattered", scattered, [(0, False), (1, True), (2, False)]),
    ("long", long_rows, [(1, False)]),
]

# ---- comparison helpers --------------------------------------------------------------------


def same_or_both_nan(a, b):
    return (a == b) | (a.isnan() & b.isnan())


def assert_values(tpu, cpu, exact, sign_open=None):
    """tpu equals cpu (NaN == NaN); zero signs agree except where `sign_open` is True."""
    tpu = tpu.cpu()
    assert tpu.dtype == cpu.dtype and tpu.shape == cpu.shape, (tpu.dtype, cpu.dtype, tpu.shape, cpu.shape)
    if exact:
        mismatch = ~same_or_both_nan(tpu, cpu)
        assert not mismatch.any(), f"values differ:\ncpu {cpu}\ntpu {tpu}"
    else:
        torch.testing.assert_close(tpu, cpu, equal_nan=True, **tolerance(cpu.dtype))
    zeros = (cpu == 0) & (tpu == 0)
    if sign_open is not None:
        zeros &= ~sign_open
    differ = zeros & (tpu.signbit() != cpu.signbit())
    assert not differ.any(), f"signs of zeros differ:\ncpu {cpu}\ntpu {tpu}"


def tolerance(dtype):
    return {
        torch.float32: dict(rtol=1e-5, atol=1e-5),
        torch.float64: dict(rtol=1e-12, atol=1e-12),
        torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
        torch.float16: dict(rtol=1e-3, atol=1e-3),
    }[dtype]


def line_view(x, dim):
    """x with `dim` moved last (the slices reductions along `dim` see)."""
    return x.movedim(dim, -1)


def mixed_zero_slices(x, dim, keepdim):
    """Per reduction result: whether its slice holds both -0.0 and +0.0."""
    z = x == 0
    if dim is None:
        neg, pos = (z & x.signbit()).any(), (z & ~x.signbit()).any()
        return neg & pos
    neg = (z & x.signbit()).any(dim, keepdim=keepdim)
    pos = (z & ~x.signbit()).any(dim, keepdim=keepdim)
    return neg & pos


def mixed_zero_operands(*operands):
    """Elementwise: whether the operands (broadcast) include zeros of both signs."""
    ops = torch.broadcast_tensors(*[o if isinstance(o, torch.Tensor) else torch.tensor(o) for o in operands])
    neg = torch.stack([(o == 0) & o.signbit() for o in ops]).any(0)
    pos = torch.stack([(o == 0) & ~o.signbit() for o in ops]).any(0)
    return neg & pos


def assert_selected_indices(x, dim, keepdim, values, tpu_idx, cpu_idx, first_nan=False):
    """tpu_idx points (along dim) at elements equal to `values`, sign included; where the value
    is unique in its slice (or, with first_nan, is NaN) it equals cpu_idx."""
    tpu_idx = tpu_idx.cpu()
    assert tpu_idx.dtype == cpu_idx.dtype == torch.int64 and tpu_idx.shape == cpu_idx.shape
    if x.dim() == 0:
        assert torch.equal(tpu_idx, cpu_idx)
        return
    if not keepdim and values.dim() < x.dim():
        values, tpu_idx, cpu_idx = values.unsqueeze(dim), tpu_idx.unsqueeze(dim), cpu_idx.unsqueeze(dim)
    picked = x.gather(dim, tpu_idx)
    assert same_or_both_nan(picked, values).all(), f"indices do not select the values:\n{picked}\n{values}"
    zeros = values == 0
    assert not (zeros & (picked.signbit() != values.signbit())).any(), "a zero's sign differs from its element's"
    # How often each selected value occurs in its slice.
    lines = line_view(x, dim).unsqueeze(-2)                      # [..., 1, n]
    wanted = line_view(values, dim).unsqueeze(-1)                # [..., k, 1]
    occurrences = same_or_both_nan(lines, wanted).sum(-1).movedim(-1, dim)
    must_match = occurrences == 1
    if first_nan:
        must_match |= values.isnan()
    assert torch.equal(tpu_idx[must_match], cpu_idx[must_match]), f"indices differ:\ncpu {cpu_idx}\ntpu {tpu_idx}"


# ---- the op table ----------------------------------------------------------------------------
#
# Each case: fn(x, dim, keepdim) -> tensor or tuple; `out` says what its outputs are:
#   "reduce"    one value per slice (zero signs open where the slice mixes them)
#   "computed"  arithmetic results (dtype tolerance; zero signs compared everywhere)
#   "pointwise" elementwise (zero signs open where the operands mix them)
#   "exact"     (values, indices) with CPU's indices exactly
#   "selected"  (values, indices) under the "selected" rule
#   "index"     indices only, exactly (argmax/argmin)
# dims: "dim" (run over INPUTS' dims) or "full" (no dim; whole tensor).


class Case:
    def __init__(self, name, fn, out, dims="dim", exact=True, dtypes=FLOATS, nan_inputs=True, first_nan=False,
                 sign_operands=None):
        self.name, self.fn, self.out, self.dims, self.exact = name, fn, out, dims, exact
        self.dtypes, self.nan_inputs, self.first_nan = dtypes, nan_inputs, first_nan
        self.sign_operands = sign_operands  # pointwise: x -> the operands whose zeros decide signs

    def __repr__(self):
        return self.name


def flip_other(x):
    return x.flip(-1)


CASES = [
    # max/min reductions: a NaN in the slice gives NaN.
    Case("amax", lambda x, d, k: x.amax(d, k), "reduce"),
    Case("amin", lambda x, d, k: x.amin(d, k), "reduce"),
    Case("amax_full", lambda x, d, k: x.amax(), "reduce", dims="full"),
    Case("amin_full", lambda x, d, k: x.amin(), "reduce", dims="full"),
    Case("max_full", lambda x, d, k: x.max(), "reduce", dims="full"),
    Case("min_full", lambda x, d, k: x.min(), "reduce", dims="full"),
    Case("aminmax", lambda x, d, k: torch.aminmax(x, dim=d, keepdim=k), "reduce"),
    Case("aminmax_full", lambda x, d, k: torch.aminmax(x), "reduce", dims="full"),
    Case("vector_norm_inf", lambda x, d, k: torch.linalg.vector_norm(x, INF, dim=d, keepdim=k), "reduce"),
    # max/min(dim) and arg reductions: NaN is the extreme, its first index wins.
    Case("max_dim", lambda x, d, k: x.max(d, k), "exact"),
    Case("min_dim", lambda x, d, k: x.min(d, k), "exact"),
    Case("argmax", lambda x, d, k: x.argmax(d, k), "index"),
    Case("argmin", lambda x, d, k: x.argmin(d, k), "index"),
    Case("argmax_full", lambda x, d, k: x.argmax(), "index", dims="full"),
    Case("argmin_full", lambda x, d, k: x.argmin(), "index", dims="full"),
    # Scans: once a NaN is seen it stays; ties take the later index.
    Case("cummax", lambda x, d, k: x.cummax(d), "exact"),
    Case("cummin", lambda x, d, k: x.cummin(d), "exact"),
    # Sorting: NaN sorts as the largest value.
    Case("sort_stable", lambda x, d, k: x.sort(dim=d, stable=True), "exact"),
    Case("sort_stable_descending", lambda x, d, k: x.sort(dim=d, descending=True, stable=True), "exact"),
    Case("sort", lambda x, d, k: x.sort(dim=d), "selected"),
    Case("msort", lambda x, d, k: torch.msort(x), "selected_values", dims="full"),
    Case("topk_largest", lambda x, d, k: x.topk(3, d), "selected"),
    Case("topk_smallest", lambda x, d, k: x.topk(3, d, largest=False), "selected"),
    Case("kthvalue", lambda x, d, k: x.kthvalue(2, d, k), "selected"),
    # Medians: median gives NaN (the first one) for a slice holding NaN; nanmedian ignores NaN.
    Case("median_dim", lambda x, d, k: x.median(d, k), "selected", first_nan=True),
    Case("nanmedian_dim", lambda x, d, k: x.nanmedian(d, k), "selected"),
    Case("median_full", lambda x, d, k: x.median(), "reduce", dims="full"),
    Case("nanmedian_full", lambda x, d, k: x.nanmedian(), "reduce", dims="full"),
    Case("mode", lambda x, d, k: x.mode(d, k), "selected", nan_inputs=False),
    # nan* reductions ignore NaN.
    Case("nansum", lambda x, d, k: x.nansum(d, k), "reduce", exact=False),
    Case("nanmean", lambda x, d, k: x.nanmean(d, k), "reduce", exact=False),
    Case("nansum_full", lambda x, d, k: x.nansum(), "reduce", dims="full", exact=False),
    Case("nanquantile", lambda x, d, k: x.nanquantile(0.3, d, k), "reduce", exact=False,
         dtypes=[torch.float32, torch.float64]),
    Case("quantile", lambda x, d, k: x.quantile(0.3, d, k), "reduce", exact=False,
         dtypes=[torch.float32, torch.float64]),
    # Sums start from +0.0 (a zero sum is +0.0); Inf - Inf is NaN.
    Case("sum", lambda x, d, k: x.sum(d, k), "computed"),
    Case("sum_full", lambda x, d, k: x.sum(), "computed", dims="full"),
    Case("mean", lambda x, d, k: x.mean(d, k), "computed"),
    Case("cumsum", lambda x, d, k: x.cumsum(d), "computed"),
    Case("cumprod", lambda x, d, k: x.cumprod(d), "computed"),
    Case("logsumexp", lambda x, d, k: x.logsumexp(d, k), "computed"),
    Case("softmax", lambda x, d, k: x.softmax(d), "computed"),
    Case("log_softmax", lambda x, d, k: x.log_softmax(d), "computed"),
    # Elementwise: maximum/minimum/clamp propagate NaN (also a NaN bound); fmax/fmin ignore it.
    Case("maximum", lambda x, d, k: torch.maximum(x, flip_other(x)), "pointwise", dims="full",
         sign_operands=lambda x: (x, flip_other(x))),
    Case("minimum", lambda x, d, k: torch.minimum(x, flip_other(x)), "pointwise", dims="full",
         sign_operands=lambda x: (x, flip_other(x))),
    Case("fmax", lambda x, d, k: torch.fmax(x, flip_other(x)), "pointwise", dims="full",
         sign_operands=lambda x: (x, flip_other(x))),
    Case("fmin", lambda x, d, k: torch.fmin(x, flip_other(x)), "pointwise", dims="full",
         sign_operands=lambda x: (x, flip_other(x))),
    Case("clamp_scalars", lambda x, d, k: x.clamp(-1.0, 1.0), "pointwise", dims="full"),
    Case("clamp_min_above_max", lambda x, d, k: x.clamp(1.0, -1.0), "pointwise", dims="full"),
    Case("clamp_nan_min", lambda x, d, k: x.clamp(min=NAN), "pointwise", dims="full"),
    Case("clamp_nan_max", lambda x, d, k: x.clamp(max=NAN), "pointwise", dims="full"),
    Case("clamp_nan_bounds", lambda x, d, k: x.clamp(NAN, 1.0), "pointwise", dims="full"),
    Case("clamp_zero_bounds", lambda x, d, k: x.clamp(0.0, 0.0), "pointwise", dims="full",
         sign_operands=lambda x: (x, 0.0)),
    Case("clamp_tensors", lambda x, d, k: x.clamp(x.flip(0), flip_other(x)), "pointwise", dims="full",
         sign_operands=lambda x: (x, x.flip(0), flip_other(x))),
    Case("clamp_min_tensor", lambda x, d, k: x.clamp_min(flip_other(x)), "pointwise", dims="full",
         sign_operands=lambda x: (x, flip_other(x))),
    # Comparison-based activations keep a NaN input NaN (ATen tests "x <= threshold").
    Case("threshold", lambda x, d, k: torch.nn.functional.threshold(x, 0.5, -3.0), "pointwise", dims="full"),
    Case("hardshrink", lambda x, d, k: torch.nn.functional.hardshrink(x, 0.5), "pointwise", dims="full"),
    Case("relu", lambda x, d, k: torch.relu(x), "pointwise", dims="full", sign_operands=lambda x: (x, 0.0)),
    Case("hardtanh", lambda x, d, k: torch.nn.functional.hardtanh(x), "pointwise", dims="full"),
    Case("clamp_max_tensor", lambda x, d, k: x.clamp_max(flip_other(x)), "pointwise", dims="full",
         sign_operands=lambda x: (x, flip_other(x))),
]


def check(case, x, dim, keepdim):
    cpu = case.fn(x, dim, keepdim)
    tpu = case.fn(x.to("tpu"), dim, keepdim)
    cpu = cpu if isinstance(cpu, tuple) else (cpu,)
    tpu = tpu if isinstance(tpu, tuple) else (tpu,)
    assert len(tpu) == len(cpu)
    where = f"{case.name} dtype={x.dtype} dim={dim} keepdim={keepdim}"
    try:
        if case.out == "reduce":
            open_signs = mixed_zero_slices(x, dim, keepdim) if dim is not None or case.dims == "full" else None
            for t, c in zip(tpu, cpu):
                assert_values(t, c, case.exact, open_signs.expand(c.shape) if c.dim() else open_signs)
        elif case.out == "computed":
            assert_values(tpu[0], cpu[0], False)
        elif case.out == "pointwise":
            operands = case.sign_operands(x) if case.sign_operands else (x,)
            assert_values(tpu[0], cpu[0], True, mixed_zero_operands(*operands))
        elif case.out == "index":
            assert tpu[0].dtype == cpu[0].dtype == torch.int64
            assert torch.equal(tpu[0].cpu(), cpu[0]), f"cpu {cpu[0]}\ntpu {tpu[0]}"
        elif case.out == "exact":
            assert_values(tpu[0], cpu[0], True)
            assert torch.equal(tpu[1].cpu(), cpu[1]), f"indices differ:\ncpu {cpu[1]}\ntpu {tpu[1]}"
        elif case.out == "selected":
            # Which of several equal zeros was picked is open; the index decides the sign.
            assert_values(tpu[0], cpu[0], True, torch.ones_like(cpu[0], dtype=torch.bool))
            keep = keepdim if dim is not None else True
            assert_selected_indices(x, dim if dim is not None else -1, keep, tpu[0].cpu(), tpu[1], cpu[1],
                                    case.first_nan)
        elif case.out == "selected_values":
            assert_values(tpu[0], cpu[0], True, torch.ones_like(cpu[0], dtype=torch.bool))
        else:
            raise AssertionError(case.out)
    except AssertionError as e:
        raise AssertionError(f"{where}: {e}") from None


def runs(case, dtype):
    """(input, dim, keepdim) for one case and dtype: every input and dim for float32, one input
    with every rule in it for the other dtypes (each new signature costs a compile)."""
    inputs = INPUTS if dtype == torch.float32 else INPUTS[:1]
    for name, make, dims in inputs:
        if not case.nan_inputs and name != "nan_free":
            continue
        x = make(dtype)
        if case.dims == "full":
            yield x, None, False
            continue
        for dim, keepdim in dims if dtype == torch.float32 else dims[1:2]:
            yield x, dim, keepdim
    if not case.nan_inputs and dtype != torch.float32:
        yield special(dtype)[NAN_FREE_ROWS], 1, False


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_nan_rules_match_cpu(case, dtype, no_fallback):
    if dtype not in case.dtypes:
        pytest.skip(f"PyTorch's CPU {case.name} does not support {dtype} (nothing to compare with)")
    for x, dim, keepdim in runs(case, dtype):
        check(case, x, dim, keepdim)


def test_rank0_and_single_element_slices(no_fallback):
    """NaN / -0.0 alone in a slice: reductions return it (and index 0)."""
    for value in (NAN, -0.0, INF, -INF):
        x = torch.tensor(value)
        for case in CASES:
            if case.out in ("reduce", "computed", "exact", "index") and case.name not in ("quantile", "nanquantile"):
                dim = None if case.dims == "full" else 0
                check(case, x, dim, False)
        column = torch.tensor([[value], [1.0]])
        for name in ("amax", "max_dim", "argmin", "cummax", "sort_stable", "median_dim"):
            case = next(c for c in CASES if c.name == name)
            check(case, column, 1, False)


def test_threshold_backward_passes_gradient_at_nan(no_fallback):
    """relu's and threshold's backward (threshold_backward) zero the gradient only where
    input <= threshold: at a NaN input the gradient flows, as on the CPU."""
    x = special(torch.float32)
    grads = []
    for device in ("cpu", "tpu"):
        leaf = x.to(device).detach().clone().requires_grad_()
        (torch.relu(leaf) * 2 + torch.nn.functional.threshold(leaf, 0.5, -3.0)).sum().backward()
        grads.append(leaf.grad)
    assert_values(grads[1], grads[0], exact=True)


def test_integer_inputs_keep_plain_extremes(no_fallback):
    """Integer and bool inputs take the plain max/min (no NaN test) and still match the CPU."""
    gen = torch.Generator().manual_seed(2)
    for dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        x = torch.randint(0 if dtype == torch.uint8 else -50, 50, (4, 9), generator=gen).to(dtype)
        for name in ("amax", "amin", "max_full", "aminmax", "max_dim", "min_dim", "cummax", "maximum", "minimum",
                     "clamp_scalars", "clamp_tensors"):
            case = next(c for c in CASES if c.name == name)
            check(case, x, None if case.dims == "full" else 1, False)
    b = torch.tensor([[True, False, True], [False, False, True]])
    for fn in (lambda z: z.amax(1), lambda z: z.amin(0), lambda z: torch.maximum(z, z.flip(1)),
               lambda z: torch.minimum(z, z.flip(0))):
        assert torch.equal(fn(b.to("tpu")).cpu(), fn(b))


# ---- the same lowerings under Fused Eager and torch.compile ---------------------------------


def nan_rule_ops(x):
    values, indices = x.max(1)
    return (x.amax(1), x.amin(0, keepdim=True), values, indices, x.argmin(1), torch.maximum(x, x.flip(1)),
            x.clamp(min=-1.0, max=1.0), x.clamp_min(x.flip(0)), torch.fmin(x, x.flip(1)), x.nansum(1))


def assert_all_match(tpu_outs, cpu_outs):
    assert len(tpu_outs) == len(cpu_outs)
    for t, c in zip(tpu_outs, cpu_outs):
        assert t.device.type == "tpu"
        if c.is_floating_point():
            assert_values(t, c, exact=False, sign_open=torch.ones_like(c, dtype=torch.bool))
        else:
            assert torch.equal(t.cpu(), c)


def test_fused_eager_uses_the_same_nan_rules(no_fallback):
    x = special(torch.float32)
    expected = nan_rule_ops(x)
    with mode(EagerMode.FUSED):
        out = nan_rule_ops(x.to("tpu"))
        got = [t.cpu() for t in out]
    assert_all_match([g.to("tpu") for g in got], expected)


def test_torch_compile_uses_the_same_nan_rules(fresh_dynamo, no_fallback):
    from torch_tpu.dynamo import graph_runner

    x = special(torch.float32)
    compiled = torch.compile(nan_rule_ops, backend="tpu", fullgraph=True)
    assert_all_match(compiled(x.to("tpu")), nan_rule_ops(x))
    # One captured XLA graph, not op-by-op execution.
    assert graph_runner.stats["captures"] == 1 and graph_runner.stats["op_by_op_calls"] == 0
