"""Differential fuzzing of the tpu device against the CPU with hypothesis.

A case is a chain of 2-6 ops drawn from ``OPS`` (about a hundred common ones: elementwise with
tensors and Python scalars, comparisons, reductions, views and shape ops, indexing, matrix
products, in-place updates), applied to inputs of random shape (0-size, 1-size and broadcasting
dims), dtype (float32, bfloat16, float16, int64, int32, bool) and layout (contiguous, transposed,
stepped slices, expanded - overlapping strides). The chain runs on CPU tensors and on their tpu
copies, in Strict or Fused Eager, and every step must agree:

* where the CPU raises, the tpu raises an exception of the same class;
* otherwise the same dtype and shape, the same strides for view ops (PyTorch defines them), and
  - when the op's inputs were bit-identical on both sides - values within dtype tolerances (exact
  for integers and bool; NaN where the CPU has NaN). Once a float drifts by an ulp (a different
  but correct ``exp``), later discontinuous ops (floor, comparisons, argmax) may legitimately
  differ, so values are compared only from identical inputs; in Strict the tpu side is re-synced
  to the CPU's values after a drift, so the rest of the chain is still checked.

Known gaps, skipped and counted in ``KNOWN_GAPS`` (each documented where it lives):
* an integral division (``remainder``, ``fmod``, ``floor_divide``, ``//``, ``%``) by a *device
  tensor* holding a zero: the CPU raises ZeroDivisionError after reading the divisor; the device
  cannot without a synchronization and returns XLA's value (a Python zero does raise);
* a matrix product of empty operands of different dtypes: the CPU returns an empty result (it
  checks dtypes only when there is work), the tpu refuses the mixed dtypes.
View strides are compared only where the view's input has the same strides on both devices:
elementwise results are laid out row-major on the device, where the CPU keeps a permuted input's
layout (a known difference of layout, not of values).

``python tests/fuzz_ops.py --examples 2000 [--mode fused] [--seed N]`` runs a longer sweep;
tests/test_fuzz_against_cpu.py runs a fixed-seed, small-budget one in CI. Every bug a sweep finds
becomes a regular test.
"""

import argparse
import contextlib
import math
import sys
from dataclasses import dataclass

import torch
from hypothesis import HealthCheck, given, settings, strategies as st

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool]
_TOL = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}


@dataclass(frozen=True)
class Op:
    name: str
    arity: int  # tensor operands
    fn: object  # (tensors..., rng) -> tensor or tuple; rng draws the op's own arguments
    view: bool = False  # the result's strides are PyTorch's to define: compare them
    # a float -> integer conversion: values out of the integer's range (and NaN, inf) are
    # undefined in PyTorch (the CPU gives INT_MIN, XLA saturates), so they are not compared
    converts: bool = False


def _dim(t, r):
    return r.randrange(t.dim()) if t.dim() else 0


def _scalar(r):
    return r.choice([2, -1, 0.5, 3.0, True, -2.5, 0])


def _unary(name):
    return Op(name, 1, lambda a, r: getattr(torch, name)(a))


def _binary(name):
    return Op(name, 2, lambda a, b, r: getattr(torch, name)(a, b))


def _with_scalar(name):
    return Op(name + "_scalar", 1, lambda a, r: getattr(torch, name)(a, _scalar(r)))


def _reduce(name, **kw):
    def fn(a, r):
        if r.random() < 0.3 or a.dim() == 0:
            return getattr(torch, name)(a, **kw)
        return getattr(torch, name)(a, _dim(a, r), keepdim=r.random() < 0.5, **kw)

    return Op(name, 1, fn)


def _inplace(name):
    def fn(a, b, r):
        out = a.clone()
        getattr(out, name)(b)
        return out

    return Op(name, 2, fn)


def _narrow(a, r):
    if a.dim() == 0:
        return a
    d = _dim(a, r)
    start = r.randrange(a.shape[d] + 1)
    return a.narrow(d, start, r.randrange(a.shape[d] - start + 1))


def _step_slice(a, r):
    if a.dim() == 0:
        return a
    d = _dim(a, r)
    index = [slice(None)] * a.dim()
    index[d] = slice(r.randrange(2), None, r.choice([1, 2, 3]))
    return a[tuple(index)]


def _permute(a, r):
    order = list(range(a.dim()))
    r.shuffle(order)
    return a.permute(order)


def _reshape(a, r):
    return a.reshape(-1) if r.random() < 0.5 or a.numel() == 0 else a.reshape(1, *a.shape)


def _expand(a, r):
    return a.unsqueeze(0).expand(r.choice([1, 2, 3]), *a.shape)


def _squeeze(a, r):
    return a.squeeze() if r.random() < 0.5 else a.squeeze(_dim(a, r)) if a.dim() else a


def _index_select(a, r):
    if a.dim() == 0 or a.shape[_dim(a, r)] == 0:
        return a.clone()
    d = _dim(a, r)
    idx = torch.tensor([r.randrange(a.shape[d]) for _ in range(r.randrange(4))], dtype=torch.int64)
    return a.index_select(d, idx.to(a.device))


def _gather(a, r):
    if a.dim() == 0 or 0 in a.shape:
        return a.clone()
    d = _dim(a, r)
    idx = torch.randint(0, a.shape[d], a.shape, generator=torch.Generator().manual_seed(r.randrange(1 << 30)))
    return a.gather(d, idx.to(a.device))


def _masked_fill(a, b, r):
    return a.masked_fill(b.bool() if b.dtype != torch.bool else b, _scalar(r))


def _where(a, b, r):
    return torch.where(a > 0 if a.dtype != torch.bool else a, a, b)


def _cat(a, b, r):
    return torch.cat([a, b], dim=_dim(a, r)) if a.dim() else torch.stack([a, b])


def _matmul(a, b, r):
    return a @ b.transpose(-1, -2) if a.dim() >= 2 and b.dim() >= 2 else torch.matmul(a, b)


def _clamp(a, r):
    lo = r.choice([None, -1, 0])
    return torch.clamp(a, min=lo, max=None if lo is not None and r.random() < 0.5 else 2)


def _softmax(name):
    return Op(name, 1, lambda a, r: getattr(torch, name)(a, _dim(a, r)))


def _cum(name):
    return Op(name, 1, lambda a, r: getattr(torch, name)(a, _dim(a, r)))


UNARY = ["abs", "neg", "exp", "log", "log1p", "sin", "cos", "tanh", "sigmoid", "relu", "sqrt", "rsqrt",
         "floor", "ceil", "round", "trunc", "sign", "square", "reciprocal", "logical_not", "bitwise_not",
         "isnan", "isinf", "isfinite", "expm1", "erf", "atan", "asin", "sinh", "frac", "signbit",
         "nan_to_num", "exp2", "log2", "positive", "angle", "deg2rad"]
BINARY = ["add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "maximum", "minimum",
          "pow", "atan2", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
          "bitwise_and", "bitwise_or", "bitwise_xor", "hypot", "copysign", "fmax", "fmin", "xlogy",
          "bitwise_left_shift", "heaviside"]
SCALAR = ["add", "sub", "mul", "div", "pow", "remainder", "floor_divide", "eq", "gt", "maximum"]
REDUCE = ["sum", "mean", "amax", "amin", "prod", "argmax", "argmin", "any", "all", "std", "var",
          "logsumexp", "nansum", "count_nonzero"]

OPS = (
    [_unary(n) for n in UNARY] + [_binary(n) for n in BINARY] + [_with_scalar(n) for n in SCALAR]
    + [_reduce(n) for n in REDUCE if n != "count_nonzero"]
    + [Op("count_nonzero", 1, lambda a, r: torch.count_nonzero(a))]
    + [_softmax("softmax"), _softmax("log_softmax"), _cum("cumsum"), _cum("cumprod")]
    + [_inplace(n) for n in ["add_", "mul_", "sub_", "div_", "copy_"]]
    + [
        Op("transpose", 1, lambda a, r: a.transpose(_dim(a, r), _dim(a, r)) if a.dim() else a, view=True),
        Op("permute", 1, _permute, view=True),
        Op("narrow", 1, _narrow, view=True),
        Op("step_slice", 1, _step_slice, view=True),
        Op("unsqueeze", 1, lambda a, r: a.unsqueeze(r.randrange(a.dim() + 1)), view=True),
        Op("squeeze", 1, _squeeze, view=True),
        Op("expand", 1, _expand, view=True),
        Op("flatten", 1, lambda a, r: a.flatten()),
        Op("reshape", 1, _reshape),
        Op("contiguous", 1, lambda a, r: a.contiguous()),
        Op("clone", 1, lambda a, r: a.clone()),
        Op("flip", 1, lambda a, r: a.flip(_dim(a, r)) if a.dim() else a.flip(())),
        Op("roll", 1, lambda a, r: a.roll(r.randrange(-3, 4), _dim(a, r)) if a.dim() else a.roll(1)),
        Op("repeat", 1, lambda a, r: a.repeat(*([r.choice([1, 2])] * max(a.dim(), 1)))),
        Op("tril", 1, lambda a, r: a.tril(r.randrange(-1, 2)) if a.dim() >= 2 else a.clone()),
        Op("triu", 1, lambda a, r: a.triu(r.randrange(-1, 2)) if a.dim() >= 2 else a.clone()),
        Op("clamp", 1, _clamp),
        Op("index_select", 1, _index_select),
        Op("gather", 1, _gather),
        Op("masked_fill", 2, _masked_fill),
        Op("where", 2, _where),
        Op("cat", 2, _cat),
        Op("matmul", 2, _matmul),
        Op("to_float", 1, lambda a, r: a.float()),
        Op("to_int", 1, lambda a, r: a.to(torch.int32), converts=True),
        Op("to_half", 1, lambda a, r: a.half()),
        Op("to_bool", 1, lambda a, r: a.bool()),
        Op("sort_values", 1, lambda a, r: torch.sort(a, _dim(a, r), stable=True)[0] if a.dim() else a.clone()),
        Op("diff", 1, lambda a, r: torch.diff(a, dim=_dim(a, r)) if a.dim() else a.clone()),
    ]
)
OP_NAMES = [op.name for op in OPS]


# ----------------------------------------------------------------------------- inputs
@st.composite
def tensors(draw):
    """A CPU tensor of random shape, dtype and layout."""
    rank = draw(st.integers(0, 3))
    shape = draw(st.lists(st.sampled_from([0, 1, 1, 2, 3, 4, 5]), min_size=rank, max_size=rank))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    layout = draw(st.sampled_from(["contiguous", "transposed", "stepped", "expanded"]))
    base_shape = list(shape)
    if layout == "stepped" and rank:
        base_shape[-1] = shape[-1] * 2
    if dtype == torch.bool:
        t = torch.rand(base_shape, generator=g) < 0.5
    elif dtype.is_floating_point:
        # a mix of small integers, halves, fractions, zeros and a few specials
        t = torch.randn(base_shape, generator=g) * 3
        t = torch.where(torch.rand(base_shape, generator=g) < 0.4, t.round() / 2, t)
        if draw(st.booleans()) and t.numel():
            t.view(-1)[0] = draw(st.sampled_from([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e4]))
        t = t.to(dtype)
    else:
        t = torch.randint(-6, 7, base_shape, generator=g, dtype=dtype)
    if layout == "transposed" and rank >= 2:
        t = t.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif layout == "stepped" and rank:
        t = t[..., ::2]
    elif layout == "expanded" and rank and shape[0] == 1:
        t = t.expand(3, *shape[1:])
    return t


@st.composite
def chains(draw):
    inputs = draw(st.lists(tensors(), min_size=1, max_size=2))
    steps = draw(st.lists(st.tuples(st.sampled_from(OP_NAMES), st.integers(0, 2**31 - 1),
                                    st.lists(st.integers(0, 7), min_size=2, max_size=2)),
                          min_size=2, max_size=6))
    return inputs, steps


# ----------------------------------------------------------------------------- comparison
class Mismatch(AssertionError):
    pass


def _identical(a, b):
    """Bitwise-equal values (NaN equal to NaN), the same shape and dtype."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(torch.equal(a, b) or (a.dtype.is_floating_point and torch.equal(a.isnan(), b.isnan())
                                      and torch.equal(a.nan_to_num(0), b.nan_to_num(0))))


def _defined(op, args):
    """Whether the op's result is defined for these inputs (see Op.converts)."""
    if not op.converts:
        return True
    a = args[0]
    return not a.dtype.is_floating_point or bool(((a.abs() < 2**31) | (a.numel() == 0)).all())


def _check_values(got, want, what):
    rtol, atol = _TOL.get(want.dtype, (0, 0))
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as e:
        raise Mismatch(f"{what}: values differ from the CPU:\n{e}") from None


def _resync(cpu):
    """A tpu tensor with the CPU tensor's values (and strides, where they do not overlap)."""
    base = cpu
    expanded = [d for d in range(cpu.dim()) if cpu.stride(d) == 0 and cpu.shape[d] > 1]
    for d in expanded:  # an expanded dim: copy one slice, expand it again on the device
        base = base.narrow(d, 0, 1)
    try:
        out = torch.empty_strided(base.shape, base.stride(), dtype=cpu.dtype, device="tpu")
        out.copy_(base)
    except RuntimeError:
        out = base.to("tpu")
    return out.expand(cpu.shape) if expanded else out


KNOWN_GAPS = {"integral division by a zero inside a device tensor": 0,
              "a matrix product of empty operands of different dtypes": 0}


def _known_gap(error, args):
    """The documented difference a CPU error falls under, or None."""
    if str(error) == "ZeroDivisionError" and len(args) > 1 and isinstance(args[1], torch.Tensor):
        return "integral division by a zero inside a device tensor"
    return None


def _known_tpu_only_error(op, error, args):
    """A documented case where the tpu raises and the CPU does not, or None."""
    if (op.name == "matmul" and "same dtype" in str(error) and any(a.numel() == 0 for a in args)):
        return "a matrix product of empty operands of different dtypes"
    return None


def _random(seed):
    import random

    return random.Random(seed)


def run_chain(inputs, steps, mode="strict"):
    """Runs the chain on the CPU and on tpu; raises Mismatch at the first disagreement."""
    from torch_tpu.execution_mode import EagerMode
    from torch_tpu.execution_mode import mode as eager_mode

    ops = {op.name: op for op in OPS}
    cpu_pool = list(inputs)
    tpu_pool = [_resync(t) for t in inputs]
    trail = [f"inputs: {[(tuple(t.shape), t.stride(), t.dtype) for t in inputs]}"]
    pending = []  # (tpu result, cpu result, inputs identical, what) checked after the chain (fused)
    fused = mode == "fused"
    with eager_mode(EagerMode.FUSED if fused else EagerMode.STRICT):
        for name, seed, picks in steps:
            op = ops[name]
            idx = [p % len(cpu_pool) for p in picks[:op.arity]]
            a_cpu = [cpu_pool[i] for i in idx]
            a_tpu = [tpu_pool[i] for i in idx]
            what = f"{' -> '.join(trail)} -> {name}{tuple(idx)} (seed {seed}, {mode})"
            trail.append(f"{name}{tuple(idx)}")
            try:
                want = op.fn(*a_cpu, _random(seed))
            except Exception as e:  # noqa: BLE001 - the tpu must raise the same class
                try:
                    got = op.fn(*a_tpu, _random(seed))
                    if fused:
                        torch.tpu.synchronize()
                except Exception as e2:  # noqa: BLE001
                    if not isinstance(e2, type(e)):
                        raise Mismatch(f"{what}: the CPU raises {type(e).__name__} ({e}), the tpu "
                                       f"{type(e2).__name__} ({e2})") from None
                    continue
                gap = _known_gap(e, a_cpu)
                if gap is not None:
                    KNOWN_GAPS[gap] += 1
                    return
                raise Mismatch(f"{what}: the CPU raises {type(e).__name__} ({e}), the tpu returns "
                               f"{tuple(got.shape)} {got.dtype}") from None
            try:
                got = op.fn(*a_tpu, _random(seed))
            except Exception as e:  # noqa: BLE001
                gap = _known_tpu_only_error(op, e, a_cpu)
                if gap is not None:
                    KNOWN_GAPS[gap] += 1
                    return
                raise Mismatch(f"{what}: the tpu raises {type(e).__name__}: {e}") from None
            if got.dtype != want.dtype or got.shape != want.shape:
                raise Mismatch(f"{what}: tpu {tuple(got.shape)} {got.dtype}, CPU {tuple(want.shape)} {want.dtype}")
            # A view's strides follow its input's: compared when the inputs' strides agree (the
            # device lays elementwise results out row-major where the CPU may keep a permutation).
            same_layout = all(x.stride() == y.stride() for x, y in zip(a_tpu, a_cpu))
            if op.view and same_layout and got.stride() != want.stride():
                raise Mismatch(f"{what}: view strides {got.stride()} on tpu, {want.stride()} on the CPU")
            if fused:
                pending.append((got, want, a_tpu, a_cpu, what) if _defined(op, a_cpu) else (got, want, [], [], what))
            else:
                same_inputs = all(_identical(x.cpu(), y) for x, y in zip(a_tpu, a_cpu)) and _defined(op, a_cpu)
                if same_inputs:
                    _check_values(got.cpu(), want, what)
                if not _identical(got.cpu(), want):
                    got = _resync(want)  # keep checking the rest of the chain from equal values
            cpu_pool.append(want)
            tpu_pool.append(got)
    for got, want, a_tpu, a_cpu, what in pending:
        if a_cpu and all(_identical(x.cpu(), y) for x, y in zip(a_tpu, a_cpu)):
            _check_values(got.cpu(), want, what)


def fuzz_test(examples, mode="strict", seed=None):
    """A hypothesis test function over `examples` chains (derandomized with `seed`)."""
    config = settings(max_examples=examples, deadline=None, derandomize=seed is None, database=None,
                      suppress_health_check=list(HealthCheck), print_blob=True)

    @config
    @given(chains())
    def check(chain):
        run_chain(*chain, mode=mode)

    if seed is not None:
        from hypothesis import seed as hseed

        check = hseed(seed)(check)
    return check


def main(argv=None):
    parser = argparse.ArgumentParser(description="Differential fuzzing of tpu ops against the CPU")
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--mode", choices=["strict", "fused"], default="strict")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: derandomized)")
    args = parser.parse_args(argv)
    import torch_tpu  # noqa: F401

    fuzz_test(args.examples, args.mode, args.seed)()
    print(f"{args.examples} chains of {len(OPS)} ops agree with the CPU ({args.mode})")


if __name__ == "__main__":
    sys.exit(main())
