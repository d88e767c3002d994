"""Random ops in the OpInfo sweep: tpu and CPU results compared as distributions.

A random op's sample is drawn repeatedly on both devices (each draw with a fresh seed, also for
OpInfo wrappers that seed every call with the same number). Each output leaf (and gradient)
of a draw is summarized by the fraction of its elements at or below a set of points, plus its
NaN, +Inf and -Inf fractions. Draws are independent while the elements within one draw need
not be (dropout2d zeroes whole channels, multinomial without replacement never repeats), so
the test works on per-draw fractions: for every point, the mean fraction over tpu draws must
agree with the mean over CPU draws within `Z` standard errors of the difference of the means.
Values are compared up to the dtype's tolerance (a tpu value within tolerance of a CPU value
counts as equal), so deterministic parts of an output (dropout's kept elements, eval-mode
rrelu) must match as closely as any other op's results, and a difference with zero spread on
both sides (a deterministic output that differs) is a mismatch.

The points are quantiles of the pooled draws of both devices (so an excess of mass on either
side is seen) and, for outputs with few distinct values, every value. With `Z` = 5.5 and 64
points, a correct op fails one leaf with probability below 3e-6; a wrong scale, shift or
probability (dropout keeping 60% instead of 50%, uniform on [0, 0.9)) fails at once.

Ops whose outputs are uninitialized memory (torch.empty and its family) have no distribution
to compare: they are checked by shape and dtype alone and reported as such, never as passes.
"""

import time

Z = 5.5
POINTS = 64
MIN_DRAWS = 30
MAX_DRAWS = 300
WANTED_VALUES = 20000  # draws continue (up to MAX_DRAWS) until each leaf has this many values
DRAW_SECONDS = 4.0  # per sample and device

# OpInfo entries whose outputs are uninitialized: nothing but shape and dtype can be compared.
UNINITIALIZED_OPS = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                     "empty_permuted"}


def _low_rank_product(out):
    """U diag(S) V^H of a (U, S, V) factorization: the same for any choice of singular-vector
    signs, which a randomized algorithm picks differently on every draw and device."""
    u, s, v = out
    return ((u * s.unsqueeze(-2)) @ v.mH,)


# Random ops whose outputs are compared through a function of them that does not depend on
# arbitrary conventions.
CANONICAL = {"svd_lowrank": _low_rank_product, "pca_lowrank": _low_rank_product}


class _FreshSeeds:
    """Within the block, every torch.manual_seed(s) seeds with a new number instead of s: OpInfo
    wraps random ops in `wrapper_set_seed`, which would make every draw the same."""

    def __init__(self, torch, start):
        self.torch, self.next = torch, start

    def __enter__(self):
        self.real = self.torch.manual_seed

        def fresh(_seed):
            self.next += 1
            return self.real(self.next)

        self.torch.manual_seed = fresh
        self.real(self.next)
        return self

    def __exit__(self, *exc):
        self.torch.manual_seed = self.real


def _flat_leaves(torch, out):
    """The tensors of a draw's output tree as flat float64 CPU vectors (complex: real and
    imaginary parts as two leaves), in tree order."""
    from torch.utils._pytree import tree_flatten

    leaves = []
    for x in tree_flatten(out)[0]:
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu()
            if x.is_complex():
                leaves += [x.real.reshape(-1).double(), x.imag.reshape(-1).double()]
            else:
                leaves.append(x.reshape(-1).double())
        elif isinstance(x, (int, float, bool)):
            leaves.append(torch.tensor([float(x)], dtype=torch.float64))
    return leaves


def collect(torch, draw, first, seed, seconds=DRAW_SECONDS):
    """Draws of one device: a list (one per leaf) of [draws, numel] float64 tensors. `first` is
    the draw already made; `draw()` makes another (for about `seconds`, at least MIN_DRAWS)."""
    rows = [[leaf] for leaf in _flat_leaves(torch, first)]
    numel = max((leaf.numel() for leaf in rows[0]), default=0) if rows else 0
    started = time.time()
    with _FreshSeeds(torch, seed):
        while True:
            count = len(rows[0]) if rows else MAX_DRAWS
            if count >= MAX_DRAWS:
                break
            if count >= MIN_DRAWS and count * max(numel, 1) >= WANTED_VALUES:
                break
            if time.time() - started > seconds and count >= MIN_DRAWS:
                break
            leaves = _flat_leaves(torch, draw())
            if len(leaves) != len(rows):
                raise RuntimeError(f"a draw gave {len(leaves)} output tensors, the first gave {len(rows)}")
            for r, leaf in zip(rows, leaves):
                r.append(leaf)
    return [torch.stack(r) for r in rows]


def _points(torch, a, b):
    """Where the fractions are compared: quantiles of both sides' pooled finite values, or every
    distinct value when there are few."""
    pooled = torch.cat([a.reshape(-1), b.reshape(-1)])
    finite = pooled[torch.isfinite(pooled)]
    if finite.numel() == 0:
        return finite
    distinct = torch.unique(finite)
    if distinct.numel() <= POINTS:
        return distinct
    qs = torch.linspace(0, 1, POINTS + 2, dtype=torch.float64)[1:-1]
    pts = []
    for side in (a.reshape(-1), b.reshape(-1)):
        values = torch.sort(side[torch.isfinite(side)]).values
        if values.numel():
            pts.append(values[(qs * (values.numel() - 1)).round().long()])
    return torch.unique(torch.cat(pts))


def _fractions_at(torch, draws, points):
    """[draws, points] fraction of each draw's elements at or below each point (-Inf counts as
    below every point; NaN and +Inf above)."""
    x = torch.nan_to_num(draws, nan=float("inf"))
    x, _ = torch.sort(x, dim=1)
    n = max(x.shape[1], 1)
    idx = torch.searchsorted(x.contiguous(), points.expand(x.shape[0], -1).contiguous(), right=True)
    return idx.double() / n


def _special_fractions(torch, draws):
    n = max(draws.shape[1], 1)
    return torch.stack([torch.isnan(draws).sum(1) / n, (draws == float("inf")).sum(1) / n,
                        (draws == float("-inf")).sum(1) / n], dim=1).double()


def _z_problem(torch, f_this, f_other_lo, f_other_hi):
    """The worst disagreement of per-draw fractions (None when every point agrees): each point's
    mean fraction on one side must lie between the other side's mean fractions at the point
    moved down and up by the tolerance, within Z standard errors of the difference."""
    mean = f_this.mean(0)
    lo, hi = f_other_lo.mean(0), f_other_hi.mean(0)
    excess = torch.clamp(torch.maximum(lo - mean, mean - hi), min=0)
    se = torch.sqrt(f_this.var(0, unbiased=True) / f_this.shape[0]
                    + torch.maximum(f_other_lo.var(0, unbiased=True), f_other_hi.var(0, unbiased=True))
                    / f_other_lo.shape[0])
    z = excess / torch.clamp(se, min=1e-12)
    bad = (excess > 1e-12) & (z > Z)
    if not bool(bad.any()):
        return None
    i = int(torch.argmax(torch.where(bad, z, torch.zeros_like(z))))
    return i, float(mean[i]), float(lo[i]), float(hi[i]), float(z[i])


def compare_leaf(torch, tpu, cpu, rtol, atol):
    """None when the [draws, numel] samples `tpu` and `cpu` agree in distribution, else why not."""
    if tpu.shape[1] == 0:
        return None
    cpu_special = _special_fractions(torch, cpu)
    problem = _z_problem(torch, _special_fractions(torch, tpu), cpu_special, cpu_special)
    if problem is not None:
        i, t, c, _, z = problem
        kind = ("NaN", "+Inf", "-Inf")[i]
        return f"fraction of {kind}: tpu {t:.4g} vs cpu {c:.4g} (z={z:.1f}, {tpu.shape[0]} draws each)"
    points = _points(torch, tpu, cpu)
    if points.numel() == 0:
        return None
    tol = atol + rtol * points.abs()
    # Each side's fraction at a point must lie between the other's at the point moved down and
    # up by the tolerance (both ways round: one way alone misses a moved atom).
    for this, other, names in ((tpu, cpu, ("tpu", "cpu")), (cpu, tpu, ("cpu", "tpu"))):
        problem = _z_problem(torch, _fractions_at(torch, this, points), _fractions_at(torch, other, points - tol),
                             _fractions_at(torch, other, points + tol))
        if problem is not None:
            i, t, lo, hi, z = problem
            return (f"distribution differs: fraction <= {float(points[i]):.6g} is {t:.4f} on {names[0]} vs "
                    f"{lo:.4f}..{hi:.4f} on {names[1]} (z={z:.1f}, {tpu.shape[0]} draws each)")
    return None


def canonical_op(name, op):
    """`op`, or for an entry of CANONICAL the op followed by its canonical form (applied before
    anything else, so gradients are taken of the canonical outputs too)."""
    canonical = CANONICAL.get(name)
    if canonical is None:
        return op
    return lambda *args, **kwargs: canonical(op(*args, **kwargs))


def compare(torch, draw_tpu, draw_cpu, first_tpu, first_cpu, tolerance, seconds=DRAW_SECONDS):
    """None when repeated draws of a random op agree in distribution on both devices, else the
    first problem. `first_*` are the draws already made (CPU tensors for tpu results);
    `tolerance(dtype)` gives (rtol, atol) of a leaf's dtype; each device draws for about
    `seconds`."""
    from torch.utils._pytree import tree_flatten

    dtypes = []
    for x in tree_flatten(first_cpu)[0]:
        if isinstance(x, torch.Tensor):
            real = x.real.dtype if x.is_complex() else x.dtype
            dtypes += [real] * (2 if x.is_complex() else 1)
        elif isinstance(x, (int, float, bool)):
            dtypes.append(torch.float64)
    tpu = collect(torch, draw_tpu, first_tpu, 1_000_003, seconds)
    cpu = collect(torch, draw_cpu, first_cpu, 2_000_003, seconds)
    if len(tpu) != len(cpu):
        return f"output structure differs: {len(tpu)} vs {len(cpu)} tensors"
    for k, (t, c, dtype) in enumerate(zip(tpu, cpu, dtypes)):
        if t.shape[1] != c.shape[1]:
            return f"output {k}: {t.shape[1]} vs {c.shape[1]} elements"
        rtol, atol = tolerance(dtype)
        problem = compare_leaf(torch, t, c, rtol, atol)
        if problem is not None:
            return f"output {k} ({dtype}): {problem}"
    return None
