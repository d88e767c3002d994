"""Runs PyTorch's OpInfo database on the `tpu` device against the CPU.

    python conformance/opinfo_sweep.py [--ops NAME ...] [--dtypes float32 bfloat16 int64 bool]
                                       [--no-backward] [--json PATH] [--markdown PATH]

Every sample of every OpInfo in torch.testing._internal.common_methods_invocations.op_db runs
on the CPU and on tpu copies of its inputs; each sample is classified:

  pass       same values (dtype-aware tolerances), no CPU fallback - compared as they are, or,
             as PyTorch's own test_compare_cpu does, after the sample's output_process_fn_grad
             (linalg results defined only up to signs of vectors). A bfloat16/float16 output
             outside the tolerance passes only where, element by element, it is at least as
             close to a float64 CPU reference as the CPU's own half-precision output is; every
             other output (float32, float64, integer, bool) is compared normally
  fallback   an op without a tpu lowering ran on the CPU (the values may still match)
  mismatch   different values, shapes or dtypes
  error      the tpu run raised while the CPU run did not
  random     an op whose outputs are uninitialized memory (empty and its family): shapes and
             dtypes match, there are no values to compare; never counted as a pass. Other
             random ops (RANDOM_OPS, attention with dropout) are drawn repeatedly on both
             devices and pass only when the distributions agree (random_compare.py)
  skip       the CPU run raised (the sample is invalid)
  truncated  not run: the per-dtype time budget ran out first

An OpInfo whose `sample_inputs` raises is reported as `sample_inputs failed` for that dtype.
Ops run in worker processes; a worker that dies (abort, segfault) marks the op it was running
as `crash` and the sweep goes on in a new worker. Results go to a JSON report and a markdown
table (docs/op_coverage.md by default for a full sweep; with --ops, only where --markdown says).
"""

import argparse
import json
import os
import subprocess
import sys
import time

if __package__:
    from . import random_compare
else:  # run as a script
    import random_compare

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DTYPES = ["float32", "bfloat16", "int64", "bool", "complex64"]

# Ops whose results are random: compared as distributions (random_compare.py), or by shape and
# dtype alone when the outputs are uninitialized memory.
RANDOM_OPS = {
    "bernoulli", "multinomial", "normal", "normal.number_mean", "normal.in_place", "uniform",
    "cauchy", "exponential", "geometric", "log_normal", "rand_like", "randn_like", "randint_like",
    "randn", "randint", "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
    "nn.functional.rrelu", "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "torch.ops.aten._efficient_attention_forward", "torch.ops.aten._flash_attention_forward",
    "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted",
    "svd_lowrank", "pca_lowrank",
}

# Positional sample arguments that PyTorch requires on the host (OpInfo creates them on the CPU
# for every device): they stay there.
HOST_ARGS = {"tensor_split": (0,)}

# Ops whose result depends on the storage around a view (as_strided reads the storage at any
# offset): their tensor inputs reach tpu with the whole CPU storage and the same size, stride
# and storage offset, as OpInfo builds them on a real device. Every other input is copied as
# its own tensor.
STORAGE_OPS = {"as_strided", "as_strided.partial_views", "as_strided_copy", "as_strided_scatter"}


def entry_name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


# --------------------------------------------------------------------------- worker side


def _setup_worker_imports():
    # OpInfo samples try many shapes on purpose: no recompilation warnings.
    os.environ.setdefault("TORCH_TPU_SHAPE_CHURN_LIMIT", "0")
    snapshot = os.environ.get("TORCH_TPU_SWEEP_SNAPSHOT")
    if snapshot:
        # The editable install's import hook would find the live build; use the snapshot.
        sys.meta_path = [f for f in sys.meta_path if "_editable_" not in type(f).__module__]
        sys.path.insert(0, snapshot)
    import torch_tpu

    if snapshot:
        assert torch_tpu.__file__.startswith(snapshot), torch_tpu.__file__


def _tolerance(torch, dtype):
    return {torch.float32: (1.3e-5, 1e-4), torch.bfloat16: (1.6e-2, 2e-2),
            torch.float16: (2e-3, 1e-4), torch.float64: (1e-7, 1e-7),
            # Complex results: the tolerance of their real component type (each part is compared).
            torch.complex64: (1.3e-5, 1e-4), torch.complex128: (1e-7, 1e-7)}.get(dtype, (0, 0))


HALF_DTYPES = ("bfloat16", "float16")


def _leaf_problem(torch, a, e, random):
    """Why tpu leaf `a` differs from CPU leaf `e` (None when they agree). Random results are
    checked for shape and dtype only."""
    if isinstance(e, torch.Tensor):
        if not isinstance(a, torch.Tensor):
            return f"expected a tensor, got {type(a).__name__}"
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(e.shape)} {e.dtype}"
        if random:
            return None
        rtol, atol = _tolerance(torch, e.dtype)
        try:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
        except AssertionError as err:
            lines = str(err).splitlines()
            return f"{e.dtype}: " + lines[0] + " " + " ".join(lines[1:3])
        return None
    if isinstance(e, (int, float, bool)) and not random:
        if isinstance(e, float) and isinstance(a, float) and (e != e) and (a != a):
            return None
        if a != e and not (isinstance(e, float) and isinstance(a, (int, float))
                           and abs(a - e) <= 1e-5 * max(1.0, abs(e))):
            return f"value {a} vs {e}"
    return None


def _compare(torch, actual, expected, random, reference=None):
    """None when `actual` (the tpu outputs, on the CPU) matches `expected` (the CPU outputs), else
    the first problem. `reference` is a zero-argument callable giving a float64 CPU reference;
    a half-precision leaf that misses the tolerance still passes when it is at least as accurate
    against that reference as the CPU's own half-precision leaf (see `_at_least_as_accurate`).
    Every other leaf is compared normally."""
    from torch.utils._pytree import tree_flatten

    a_leaves, a_spec = tree_flatten(actual)
    e_leaves, e_spec = tree_flatten(expected)
    if len(a_leaves) != len(e_leaves):
        return f"output structure differs: {a_spec} vs {e_spec}"
    ref_leaves = None
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        problem = _leaf_problem(torch, a, e, random)
        if problem is None:
            continue
        half = isinstance(e, torch.Tensor) and str(e.dtype).replace("torch.", "") in HALF_DTYPES
        if half and reference is not None and isinstance(a, torch.Tensor) and a.shape == e.shape \
                and a.dtype == e.dtype:
            if ref_leaves is None:
                ref_leaves = _reference_leaves(reference, len(e_leaves))
            if ref_leaves is not None and _at_least_as_accurate(torch, a, e, ref_leaves[i]):
                continue
        return problem
    return None


def _reference_leaves(reference, count):
    """The float64 reference's flattened outputs, or None when it cannot be computed or its
    structure differs from the CPU's."""
    from torch.utils._pytree import tree_flatten

    try:
        leaves = tree_flatten(reference())[0]
    except Exception:
        return None
    return leaves if len(leaves) == count else None


def _at_least_as_accurate(torch, a, e, r):
    """True when every element of the tpu half-precision tensor `a` either matches the CPU's `e`
    within the dtype's tolerance or is at least as close to the float64 reference `r` as `e` is
    (the CPU accumulates some half-precision ops in half precision; torch_tpu accumulates in
    float32). Elements that are NaN in both tpu and CPU results pass; a NaN only on tpu fails."""
    if not isinstance(r, torch.Tensor) or r.shape != e.shape or not r.dtype.is_floating_point:
        return False
    if a.numel() == 0:
        return True
    a64, e64, r64 = a.double(), e.double(), r.double()
    rtol, atol = _tolerance(torch, e.dtype)
    close_to_cpu = (a64 - e64).abs() <= atol + rtol * e64.abs()
    both_nan = torch.isnan(a64) & torch.isnan(e64)
    same_inf = torch.isinf(a64) & (a64 == e64)
    err_tpu, err_cpu = (a64 - r64).abs(), (e64 - r64).abs()
    # Only float64 rounding slack: the tpu element must not be farther from the reference. A
    # NaN error (NaN or Inf against the reference) on tpu fails; one only on the CPU does not.
    no_worse = ~torch.isnan(err_tpu) & (torch.isnan(err_cpu) | (err_tpu <= err_cpu * (1 + 1e-12)))
    return bool((close_to_cpu | both_nan | same_inf | no_worse).all())


def _grads(torch, out, inputs):
    from torch.utils._pytree import tree_flatten

    leaves = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    outs = [o for o in tree_flatten(out)[0]
            if isinstance(o, torch.Tensor) and o.requires_grad and o.dtype.is_floating_point]
    if not outs or not leaves:
        return []
    total = sum(o.sum() for o in outs)
    # The graph is kept: a mismatch is compared again after output_process_fn_grad.
    return list(torch.autograd.grad(total, leaves, allow_unused=True, retain_graph=True))


def _processed_problem(torch, sample, cpu_out, tpu_out, cpu_in, tpu_in, want_grad, to_cpu):
    """The comparison PyTorch's own test_compare_cpu makes: outputs (and, for backward, the
    gradients of them) after the sample's `output_process_fn_grad`, which linalg entries use
    where a result is defined only up to a convention (the signs of singular vectors and
    eigenvectors). None when they agree."""
    from torch.utils._pytree import tree_map

    proc = getattr(sample, "output_process_fn_grad", None)
    if proc is None:
        return "no output_process_fn_grad"
    try:
        p_cpu, p_tpu = proc(cpu_out), proc(tpu_out)
        problem = _compare(torch, tree_map(to_cpu, p_tpu), p_cpu, False)
        if problem is None and want_grad:
            problem = _compare(torch, tree_map(to_cpu, _grads(torch, p_tpu, tpu_in)),
                               _grads(torch, p_cpu, cpu_in), False)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return problem


def _float64_reference(torch, op, sample):
    """A callable giving `op` on the sample with half-precision tensors raised to float64 (None
    when the sample has none). The inputs are copied now, before the CPU run can modify them."""
    from torch.utils._pytree import tree_flatten, tree_map

    half = (torch.bfloat16, torch.float16)
    leaves = tree_flatten((sample.input, sample.args, sample.kwargs))[0]
    if not any(isinstance(x, torch.Tensor) and x.dtype in half for x in leaves):
        return None

    def up(x):
        if isinstance(x, torch.Tensor):
            x = x.detach()
            return x.double() if x.dtype in half else x.clone()
        return x

    inp, args, kwargs = up(sample.input), tree_map(up, sample.args), tree_map(up, sample.kwargs)
    return lambda: op(inp, *args, **kwargs)


# Per-sample outcomes, in the order the report lists them. `random` samples ran on both sides
# but only their shapes and dtypes were compared; `truncated` samples were never run (the
# per-dtype time budget ran out).
SAMPLE_STATUSES = ("pass", "fallback", "mismatch", "error", "random", "skip", "truncated")


def run_sample(op, sample, random, want_grad, draw_seconds=random_compare.DRAW_SECONDS):
    """(status, message) for one OpInfo sample: pass, fallback, mismatch, error, random
    (an op with uninitialized outputs: shapes and dtypes match, there are no values to compare)
    or skip (the CPU raised). A random op's results are compared as distributions over repeated
    draws (conformance/random_compare.py), each device drawing for about `draw_seconds`."""
    import torch
    import torch_tpu
    from torch.utils._pytree import tree_map

    name = entry_name(op)
    keep_storage = name in STORAGE_OPS
    if random:
        op = random_compare.canonical_op(name, op)

    def to_tpu(x):
        if isinstance(x, torch.Tensor):
            t = x.detach().to("tpu")
            if keep_storage and x.layout == torch.strided and x.numel() > 0:
                whole = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage())  # the flat storage
                t = whole.to("tpu").as_strided(x.size(), x.stride(), x.storage_offset())
            t.requires_grad_(x.requires_grad)
            return t
        return x

    def to_cpu(x):
        return x.detach().cpu() if isinstance(x, torch.Tensor) else x

    # Inputs are copied to tpu (and for the float64 reference) before the CPU run, which may
    # modify them in place.
    host = HOST_ARGS.get(name, ())
    copy_error = None
    try:
        args = tuple(a if i in host else tree_map(to_tpu, a) for i, a in enumerate(sample.args))
        tpu_in = (tree_map(to_tpu, sample.input), args, tree_map(to_tpu, sample.kwargs))
    except Exception as e:
        copy_error = e
    # The half-precision accuracy exemption is for forward outputs only.
    reference = None if want_grad else _float64_reference(torch, op, sample)
    try:
        cpu_out = op(sample.input, *sample.args, **sample.kwargs)
        cpu_grads = _grads(torch, cpu_out, (sample.input, sample.args, sample.kwargs)) if want_grad else None
    except Exception:
        return "skip", "cpu raised"
    torch_tpu.reset_fallback_counts()
    try:
        if copy_error is not None:
            raise copy_error
        tpu_out = op(tpu_in[0], *tpu_in[1], **tpu_in[2])
        tpu_grads = _grads(torch, tpu_out, tpu_in) if want_grad else None
        tpu_out_cpu = tree_map(to_cpu, tpu_out)
    except Exception as e:
        msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        return "error", f"{type(e).__name__}: {msg}"
    fell_back = torch_tpu.fallback_counts()
    problem = _compare(torch, tpu_out_cpu, cpu_out, random, reference)
    if problem is None and want_grad:
        problem = _compare(torch, tree_map(to_cpu, tpu_grads), cpu_grads, random)
    if problem is not None and not random and _processed_problem(
            torch, sample, cpu_out, tpu_out, (sample.input, sample.args, sample.kwargs), tpu_in, want_grad,
            to_cpu) is None:
        problem = None
    if fell_back:
        return "fallback", ", ".join(sorted(fell_back))
    if problem is not None:
        return "mismatch", problem[:300]
    if random and name in random_compare.UNINITIALIZED_OPS:
        return "random", ""
    if random:
        def draw_cpu():
            out = op(sample.input, *sample.args, **sample.kwargs)
            return out, (_grads(torch, out, (sample.input, sample.args, sample.kwargs)) if want_grad else None)

        def draw_tpu():
            out = op(tpu_in[0], *tpu_in[1], **tpu_in[2])
            grads = _grads(torch, out, tpu_in) if want_grad else None
            return tree_map(to_cpu, out), tree_map(to_cpu, grads)

        try:
            problem = random_compare.compare(
                torch, draw_tpu, draw_cpu, (tpu_out_cpu, tree_map(to_cpu, tpu_grads)), (cpu_out, cpu_grads),
                lambda dtype: _tolerance(torch, dtype), draw_seconds)
        except Exception as e:
            msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            return "error", f"{type(e).__name__} while drawing again: {msg}"
        fell_back = torch_tpu.fallback_counts()
        if fell_back:
            return "fallback", ", ".join(sorted(fell_back))
        if problem is not None:
            return "mismatch", problem[:300]
    return "pass", ""


# Attention entries whose samples pass dropout_p positionally: (index in sample.args, whether
# the `training` keyword (default True) gates the dropout).
POSITIONAL_DROPOUT = {"nn.functional.multi_head_attention_forward": (9, True)}


def _sample_is_random(op_random, sample, name=None):
    # Attention with dropout draws random masks: only shapes and dtypes can be compared.
    if op_random or float(sample.kwargs.get("dropout_p", 0) or 0) > 0:
        return True
    if name in POSITIONAL_DROPOUT:
        index, gated = POSITIONAL_DROPOUT[name]
        p = sample.args[index] if len(sample.args) > index else 0
        return float(p or 0) > 0 and (not gated or bool(sample.kwargs.get("training", True)))
    return False


def check_op(op, dtypes, backward, time_budget=60.0):
    """Runs every sample of OpInfo `op` for each dtype name; returns the per-dtype counts.

    Each direction's counts hold every status of SAMPLE_STATUSES (samples cut by the time budget
    are `truncated`); when `sample_inputs` itself raises, the direction holds
    {"inputs_failed": 1} and the message says why."""
    import torch

    name = entry_name(op)
    result = {"name": name, "dtypes": {}}
    random = name in RANDOM_OPS
    supported = {str(d).replace("torch.", "") for d in op.supported_dtypes("cpu")}
    for dname in dtypes:
        if dname not in supported:
            continue
        messages = {}
        modes = [False]
        if backward and dname == "float32" and op.supports_autograd:
            modes.append(True)
        for want_grad in modes:
            key = "backward" if want_grad else "forward"
            counts = dict.fromkeys(SAMPLE_STATUSES, 0)
            try:
                samples = list(op.sample_inputs("cpu", getattr(torch, dname), requires_grad=want_grad))
            except Exception as e:
                result["dtypes"].setdefault(dname, {})[key] = {"inputs_failed": 1}
                messages[key] = f"sample_inputs failed: {type(e).__name__}: {e}"[:300]
                continue
            started = time.time()
            for i, sample in enumerate(samples):
                if time.time() - started > time_budget:
                    counts["truncated"] = len(samples) - i
                    messages.setdefault(key, f"truncated: {len(samples) - i} of {len(samples)} samples "
                                             f"not run ({time_budget:g}s budget)")
                    break
                # Random samples draw repeatedly: they share what is left of the budget.
                draw_seconds = min(random_compare.DRAW_SECONDS,
                                   max(0.2, (time_budget - (time.time() - started)) / (4 * (len(samples) - i))))
                status, msg = run_sample(op, sample, _sample_is_random(random, sample, name), want_grad,
                                         draw_seconds)
                counts[status] += 1
                if status in ("fallback", "mismatch", "error") and not messages.get(key, "").startswith(
                        ("fallback", "mismatch", "error")):
                    messages[key] = f"{status}: {msg}"
            result["dtypes"].setdefault(dname, {})[key] = counts
        if messages:
            result["dtypes"].setdefault(dname, {})["messages"] = messages
    return result


def worker_main(ops, dtypes, backward, progress_path):
    _setup_worker_imports()
    import warnings

    import torch_tpu
    from torch.testing._internal.common_methods_invocations import op_db

    torch_tpu.set_fallback_mode("warn")
    warnings.filterwarnings("ignore")
    by_name = {entry_name(o): o for o in op_db}
    with open(progress_path, "a") as progress:
        for name in ops:
            progress.write(json.dumps({"start": name}) + "\n")
            progress.flush()
            result = check_op(by_name[name], dtypes, backward)
            progress.write(json.dumps({"done": name, "result": result}) + "\n")
            progress.flush()


# --------------------------------------------------------------------------- parent side


def all_entry_names():
    from torch.testing._internal.common_methods_invocations import op_db

    return [entry_name(o) for o in op_db]


def snapshot_package(workdir):
    """Copies the built torch_tpu package (Python files and _C) into `workdir`, so the sweep's
    workers are not affected by rebuilds while it runs. Returns the directory to import from."""
    import importlib.util
    import shutil

    dest = os.path.join(workdir, "snapshot")
    shutil.copytree(os.path.join(ROOT, "torch_tpu"), os.path.join(dest, "torch_tpu"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    ext = importlib.util.find_spec("torch_tpu._C").origin
    shutil.copy2(ext, os.path.join(dest, "torch_tpu", os.path.basename(ext)))
    return dest


def run_sweep(names, dtypes, backward, per_worker_timeout):
    import shutil
    import tempfile

    results = {}
    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="opinfo_sweep_", dir=os.path.join(ROOT, "build"))
    env = dict(os.environ, TORCH_TPU_SWEEP_SNAPSHOT=snapshot_package(workdir))
    remaining = list(names)
    progress_path = os.path.join(workdir, "progress.jsonl")
    while remaining:
        if os.path.exists(progress_path):
            os.remove(progress_path)
        cmd = [sys.executable, __file__, "--worker", "--progress", progress_path, "--dtypes", *dtypes,
               "--ops", *remaining]
        if not backward:
            cmd.append("--no-backward")
        try:
            proc = subprocess.run(cmd, cwd=ROOT, timeout=per_worker_timeout, capture_output=True, text=True, env=env)
            died = proc.returncode != 0
            why = f"worker exited with {proc.returncode}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}"
        except subprocess.TimeoutExpired:
            died, why = True, "timeout"
        started = None
        if os.path.exists(progress_path):
            for line in open(progress_path):
                rec = json.loads(line)
                if "start" in rec:
                    started = rec["start"]
                else:
                    results[rec["done"]] = rec["result"]
                    started = None
        remaining = [n for n in remaining if n not in results]
        if died and started is not None:
            results[started] = {"name": started, "crash": why[:300], "dtypes": {}}
            remaining = [n for n in remaining if n != started]
        elif died and not results:
            raise SystemExit(f"sweep worker failed before running any op: {why}")
        print(f"sweep: {len(results)}/{len(names)} ops done", file=sys.stderr, flush=True)
    shutil.rmtree(workdir, ignore_errors=True)
    return results


# Per-entry categories, worst first: the report counts entries in each.
CATEGORIES = ("crash", "sample_inputs failed", "error", "mismatch", "fallback", "truncated",
              "uninitialized: shape/dtype only", "no samples", "no float32", "pass")


def _worst(counts):
    """The category of one direction's counts (a dict from check_op)."""
    if counts.get("inputs_failed"):
        return "sample_inputs failed"
    for status in ("error", "mismatch", "fallback", "truncated"):
        if counts.get(status):
            return status
    if counts.get("random"):
        return "uninitialized: shape/dtype only"
    if counts.get("pass", 0) == 0:
        return "no samples"
    return "pass"


def classify(entry):
    """The entry's float32 forward category: 'pass' only if every float32 forward sample ran and
    passed without fallback (none random, none cut by the time budget)."""
    if "crash" in entry:
        return "crash"
    f32 = entry["dtypes"].get("float32")
    if f32 is None or "forward" not in f32:
        return "no float32"
    return _worst(f32["forward"])


def classify_any(entry):
    """The entry's worst category over every dtype and direction it ran."""
    if "crash" in entry:
        return "crash"
    found = [_worst(d[k]) for d in entry["dtypes"].values() for k in ("forward", "backward") if k in d]
    if not found:
        return "no float32"
    return min(found, key=CATEGORIES.index)


def passes_measure(entry):
    """The conformance measure: every float32 forward and backward (where differentiable) and
    complex64 forward sample the entry has passes; an entry with none of those (integer-only
    ops) is judged on the dtypes it has. Uninitialized outputs and entries without samples
    never pass."""
    if "crash" in entry:
        return False
    d = entry["dtypes"]
    found = [_worst(d[x][k]) for x, keys in (("float32", ("forward", "backward")), ("complex64", ("forward",)))
             if x in d for k in keys if k in d[x]]
    if not found:
        found = [_worst(v[k]) for v in d.values() for k in ("forward", "backward") if k in v]
    return bool(found) and all(k == "pass" for k in found)


def summarize(results, names):
    """(entries per float32-forward category, entries per worst category over all dtypes,
    samples per status over all dtypes and directions)."""
    totals, any_totals = {}, {}
    for n in names:
        k = classify(results[n])
        totals[k] = totals.get(k, 0) + 1
        k = classify_any(results[n])
        any_totals[k] = any_totals.get(k, 0) + 1
    sample_totals = dict.fromkeys(SAMPLE_STATUSES + ("inputs_failed",), 0)
    for r in results.values():
        for d in r["dtypes"].values():
            for key in ("forward", "backward"):
                for s, v in d.get(key, {}).items():
                    sample_totals[s] += v
    return totals, any_totals, sample_totals


def write_markdown(path, results, names, dtypes, totals, any_totals, sample_totals, rerun=()):
    entries = len(names)
    passing = totals.get("pass", 0)
    with_f32 = entries - totals.get("no float32", 0)
    lines = [
        "# Op coverage: PyTorch OpInfo on the tpu device",
        "",
        "Generated by `python conformance/opinfo_sweep.py` (do not edit by hand). Every sample of every",
        "OpInfo in `torch.testing._internal.common_methods_invocations.op_db` runs on the CPU and on tpu",
        "copies of its inputs (forward for " + ", ".join(dtypes) + "; backward for float32 where the",
        "OpInfo supports autograd). A sample passes when values match within dtype-aware tolerances and",
        "no op fell back to the CPU; outputs that differ as they are are compared again after the",
        "sample's `output_process_fn_grad`, as PyTorch's own `test_compare_cpu` does (linalg results",
        "defined only up to the signs of singular vectors and eigenvectors; for backward, gradients",
        "of the processed outputs). A half-precision output outside the tolerance still passes when",
        "it is at least as close to a float64 CPU reference as the CPU's own half-precision output",
        "(element by element); no other output gets that exemption. Random ops (and attention with",
        "dropout) are drawn repeatedly on both devices and pass only when the distributions of every",
        "output and gradient agree (per-draw fractions below 64 quantile points, NaN and Inf",
        "fractions, z < 5.5; see `conformance/random_compare.py`). Ops whose outputs are",
        "uninitialized memory (`empty` and its family) are compared by shape and dtype only and",
        "counted as `random`, never as passes.",
        "Samples cut by the per-dtype time budget count as `truncated`; an OpInfo whose",
        "`sample_inputs` raises counts as `sample_inputs failed`.",
    ]
    if rerun:
        lines += [
            "",
            f"The full sweep's report was updated by a targeted rerun (`--update`) of {len(rerun)} "
            "entries after fixes: " + ", ".join(f"`{n}`" for n in sorted(rerun)) + ".",
        ]
    lines += [
        "",
        "## Totals",
        "",
        f"* OpInfo entries: {entries}",
        f"* entries passing all float32 forward samples without fallback: **{passing}** "
        f"({100.0 * passing / max(entries, 1):.1f}% of all entries, {100.0 * passing / max(with_f32, 1):.1f}% "
        f"of the {with_f32} entries that support float32)",
    ]
    measured = [n for n in names if passes_measure(results[n])]
    lines.append(f"* **conformance measure**: entries passing every float32 forward and backward and complex64 "
                 f"sample they have (integer-only entries: every sample): **{len(measured)}** "
                 f"({100.0 * len(measured) / max(entries, 1):.1f}% of all {entries} entries); not passing: "
                 + ", ".join(f"`{n}`" for n in sorted(set(names) - set(measured))))
    for k in CATEGORIES:
        if k != "pass":
            lines.append(f"* entries whose worst float32 forward result is `{k}`: {totals.get(k, 0)}")
    lines.append("* entries by worst result over every dtype and direction: "
                 + ", ".join(f"{k} {any_totals.get(k, 0)}" for k in CATEGORIES))
    lines.append(
        "* samples (all dtypes, forward and backward): "
        + ", ".join(f"{k} {v}" for k, v in sample_totals.items() if k != "inputs_failed")
        + f"; sample_inputs failures: {sample_totals.get('inputs_failed', 0)}"
    )
    others = [d for d in dtypes if d != "float32"]
    lines += ["", "## Per op", "", "| op | float32 fwd | float32 bwd | " + " | ".join(others)
              + " | random | truncated | first problem |",
              "|---|---|---|" + "---|" * len(others) + "---|---|---|"]

    def cell(c):
        if not c:
            return ""
        if c.get("inputs_failed"):
            return "inputs failed"
        shown = ("fallback", "mismatch", "error", "random", "truncated")
        bad = [f"{k[0]}{c[k]}" for k in shown if c.get(k)]
        compared = sum(v for k, v in c.items() if k in ("pass", "fallback", "mismatch", "error"))
        return f"{c['pass']}/{compared}" + (" " + " ".join(bad) if bad else "")

    def summed(d, status):
        return sum(d[x][k].get(status, 0) for x in d for k in ("forward", "backward") if k in d[x])

    for n in sorted(names):
        r = results[n]
        if "crash" in r:
            lines.append(f"| {n} | crash | | " + " | " * len(others) + " | | " + r["crash"].replace("|", "/") + " |")
            continue
        d = r["dtypes"]
        f32 = d.get("float32", {})
        cells = [cell(d.get(x, {}).get("forward")) for x in others]
        msg = ""
        for x in dtypes:
            m = d.get(x, {}).get("messages")
            if m:
                # Forward first, then backward (a report read back from JSON has its keys sorted).
                order = sorted(m, key=lambda k: (k != "forward", k))
                msg = f"{x} " + "; ".join(f"{k}: {m[k]}" for k in order)
                break
        msg = msg.replace("|", "/").replace("\n", " ")[:240]
        rnd, cut = summed(d, "random"), summed(d, "truncated")
        lines.append(f"| {n} | {cell(f32.get('forward'))} | {cell(f32.get('backward'))} | " + " | ".join(cells)
                     + f" | {rnd or ''} | {cut or ''} | {msg} |")
    lines += ["", "Cell format: passing samples / compared samples, then counts of f(allback), m(ismatch),",
              "e(rror), r(andom: uninitialized outputs, shape/dtype only) and t(runcated: not run); `inputs",
              "failed`: the OpInfo's sample_inputs raised. Empty: the OpInfo does not",
              "support that dtype. `random`: samples compared by shape and dtype only (all dtypes and",
              "directions); `truncated`: samples not run because the time budget ran out.", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def update_full_report(path, results, markdown):
    """Replaces `results`' entries in the full sweep report at `path` (same dtypes required),
    writes it back, and rewrites `markdown` from it, naming every entry rerun so far."""
    with open(path) as f:
        full = json.load(f)
    for name, entry in results.items():
        if name not in full["ops"]:
            raise SystemExit(f"--update: {name} is not in {path}")
        full["ops"][name] = entry
    rerun = sorted(set(full.get("rerun", [])) | set(results))
    names = sorted(full["ops"])
    totals, any_totals, sample_totals = summarize(full["ops"], names)
    full.update(totals=totals, totals_any_dtype=any_totals, samples=sample_totals, rerun=rerun)
    with open(path, "w") as f:
        json.dump(full, f, indent=1, sort_keys=True)
    write_markdown(markdown, full["ops"], names, full["dtypes"], totals, any_totals, sample_totals, rerun)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="*", help="OpInfo entry names (default: all)")
    parser.add_argument("--dtypes", nargs="*", default=DEFAULT_DTYPES)
    parser.add_argument("--no-backward", action="store_true")
    parser.add_argument("--json", default=os.path.join(ROOT, "build", "opinfo_report.json"))
    parser.add_argument("--markdown", default=None,
                        help="default: docs/op_coverage.md for a full sweep, none with --ops")
    parser.add_argument("--update", metavar="FULL_JSON",
                        help="with --ops: replace these entries in a full sweep's JSON report, write it "
                             "back and rewrite docs/op_coverage.md from it (the page lists the rerun entries)")
    parser.add_argument("--worker-timeout", type=int, default=3600)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--progress", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        worker_main(args.ops, args.dtypes, not args.no_backward, args.progress)
        return
    known = all_entry_names()
    names = args.ops or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise SystemExit(f"unknown OpInfo entries: {', '.join(unknown)}")
    if args.markdown is None and not args.ops:
        args.markdown = os.path.join(ROOT, "docs", "op_coverage.md")
    started = time.time()
    results = run_sweep(names, args.dtypes, not args.no_backward, args.worker_timeout)
    totals, any_totals, sample_totals = summarize(results, names)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"dtypes": args.dtypes, "totals": totals, "totals_any_dtype": any_totals,
                   "samples": sample_totals, "seconds": time.time() - started, "ops": results},
                  f, indent=1, sort_keys=True)
    if args.markdown:
        write_markdown(args.markdown, results, names, args.dtypes, totals, any_totals, sample_totals)
    if args.update:
        update_full_report(args.update, results, args.markdown or os.path.join(ROOT, "docs", "op_coverage.md"))
    print(json.dumps({"entries": len(names), "totals": totals, "totals_any_dtype": any_totals,
                      "samples": sample_totals, "seconds": round(time.time() - started)}))


if __name__ == "__main__":
    main()
