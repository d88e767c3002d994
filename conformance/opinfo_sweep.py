"""Runs PyTorch's OpInfo database on the `tpu` device against the CPU.

    python conformance/opinfo_sweep.py [--ops NAME ...] [--dtypes float32 bfloat16 int64 bool]
                                       [--no-backward] [--json PATH] [--markdown PATH]

Every sample of every OpInfo in torch.testing._internal.common_methods_invocations.op_db runs
on the CPU and on tpu copies of its inputs; each sample is classified:

  pass       same values (dtype-aware tolerances), no CPU fallback
  fallback   an op without a tpu lowering ran on the CPU (the values may still match)
  mismatch   different values, shapes or dtypes
  error      the tpu run raised while the CPU run did not
  skip       the CPU run raised (the sample is invalid) or the op is random (values not compared)

Ops run in worker processes; a worker that dies (abort, segfault) marks the op it was running
as `crash` and the sweep goes on in a new worker. Results go to a JSON report and a markdown
table (docs/op_coverage.md by default).
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DTYPES = ["float32", "bfloat16", "int64", "bool"]

# Ops whose results are random: only shapes and dtypes are compared.
RANDOM_OPS = {
    "bernoulli", "multinomial", "normal", "normal.number_mean", "normal.in_place", "uniform",
    "cauchy", "exponential", "geometric", "log_normal", "rand_like", "randn_like", "randint_like",
    "randn", "randint", "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
    "nn.functional.rrelu", "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "torch.ops.aten._efficient_attention_forward", "torch.ops.aten._flash_attention_forward",
    "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted",
    "svd_lowrank", "pca_lowrank", "hash_tensor",
}

# Positional sample arguments that PyTorch requires on the host (OpInfo creates them on the CPU
# for every device): they stay there.
HOST_ARGS = {"tensor_split": (0,)}


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
            torch.float16: (2e-3, 1e-4), torch.float64: (1e-7, 1e-7)}.get(dtype, (0, 0))


def _compare(torch, actual, expected, random):
    from torch.utils._pytree import tree_flatten

    a_leaves, a_spec = tree_flatten(actual)
    e_leaves, e_spec = tree_flatten(expected)
    if len(a_leaves) != len(e_leaves):
        return f"output structure differs: {a_spec} vs {e_spec}"
    for a, e in zip(a_leaves, e_leaves):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"expected a tensor, got {type(a).__name__}"
            if a.shape != e.shape or a.dtype != e.dtype:
                return f"shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(e.shape)} {e.dtype}"
            if random:
                continue
            rtol, atol = _tolerance(torch, e.dtype)
            try:
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
            except AssertionError as err:
                return str(err).splitlines()[0] + " " + " ".join(str(err).splitlines()[1:3])
        elif isinstance(e, (int, float, bool)) and not random:
            if isinstance(e, float) and isinstance(a, float) and (e != e) and (a != a):
                continue
            if a != e and not (isinstance(e, float) and abs(a - e) <= 1e-5 * max(1.0, abs(e))):
                return f"value {a} vs {e}"
    return None


def _at_least_as_accurate(torch, tpu_out, cpu_out, op, sample):
    """For half-precision results that differ from the CPU's: True when every tpu element is at
    least as close to a float64 reference as the CPU's element is (the CPU accumulates some
    half-precision ops in half precision; torch_tpu accumulates in float32)."""
    from torch.utils._pytree import tree_flatten, tree_map

    def up(x):
        return x.double() if isinstance(x, torch.Tensor) and x.dtype in (torch.bfloat16, torch.float16) else x

    try:
        ref = op(up(sample.input), *tree_map(up, sample.args), **tree_map(up, sample.kwargs))
    except Exception:
        return False
    for a, e, r in zip(tree_flatten(tpu_out)[0], tree_flatten(cpu_out)[0], tree_flatten(ref)[0]):
        if not isinstance(e, torch.Tensor) or e.dtype not in (torch.bfloat16, torch.float16):
            continue
        if not isinstance(a, torch.Tensor) or not isinstance(r, torch.Tensor) or a.shape != e.shape:
            return False
        err_tpu = (a.double() - r.double()).abs()
        err_cpu = (e.double() - r.double()).abs()
        slack = 1e-3 * r.double().abs() + 1e-3
        if not bool(((err_tpu <= err_cpu + slack) | (err_tpu != err_tpu) & (err_cpu != err_cpu)).all()):
            return False
    return True


def _grads(torch, out, inputs):
    from torch.utils._pytree import tree_flatten

    leaves = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    outs = [o for o in tree_flatten(out)[0]
            if isinstance(o, torch.Tensor) and o.requires_grad and o.dtype.is_floating_point]
    if not outs or not leaves:
        return []
    total = sum(o.sum() for o in outs)
    return list(torch.autograd.grad(total, leaves, allow_unused=True))


def run_sample(op, sample, random, want_grad):
    """(status, message) for one OpInfo sample: pass, fallback, mismatch, error or skip."""
    import torch
    import torch_tpu
    from torch.utils._pytree import tree_map

    def to_tpu(x):
        if isinstance(x, torch.Tensor):
            t = x.detach().to("tpu")
            t.requires_grad_(x.requires_grad)
            return t
        return x

    def to_cpu(x):
        return x.detach().cpu() if isinstance(x, torch.Tensor) else x

    try:
        cpu_out = op(sample.input, *sample.args, **sample.kwargs)
        cpu_grads = _grads(torch, cpu_out, (sample.input, sample.args, sample.kwargs)) if want_grad else None
    except Exception:
        return "skip", "cpu raised"
    host = HOST_ARGS.get(entry_name(op), ())
    torch_tpu.reset_fallback_counts()
    try:
        args = tuple(a if i in host else tree_map(to_tpu, a) for i, a in enumerate(sample.args))
        tpu_in = (tree_map(to_tpu, sample.input), args, tree_map(to_tpu, sample.kwargs))
        tpu_out = op(tpu_in[0], *tpu_in[1], **tpu_in[2])
        tpu_grads = _grads(torch, tpu_out, tpu_in) if want_grad else None
        tpu_out_cpu = tree_map(to_cpu, tpu_out)
    except Exception as e:
        msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        return "error", f"{type(e).__name__}: {msg}"
    fell_back = torch_tpu.fallback_counts()
    problem = _compare(torch, tpu_out_cpu, cpu_out, random)
    if problem is not None and not want_grad and _at_least_as_accurate(torch, tpu_out_cpu, cpu_out, op, sample):
        problem = None
    if problem is None and want_grad:
        problem = _compare(torch, tree_map(to_cpu, tpu_grads), cpu_grads, random)
    if fell_back:
        return "fallback", ", ".join(sorted(fell_back))
    if problem is not None:
        return "mismatch", problem[:300]
    return "pass", ""


def check_op(op, dtypes, backward, time_budget=60.0):
    """Runs every sample of OpInfo `op` for each dtype name; returns the per-dtype counts."""
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
            counts = {"pass": 0, "fallback": 0, "mismatch": 0, "error": 0, "skip": 0}
            try:
                samples = list(op.sample_inputs("cpu", getattr(torch, dname), requires_grad=want_grad))
            except Exception as e:
                messages.setdefault(key, f"sample_inputs failed: {e}"[:300])
                continue
            started = time.time()
            for sample in samples:
                if time.time() - started > time_budget:
                    break
                # Attention with dropout draws random masks: compare shapes and dtypes only.
                sample_random = random or float(sample.kwargs.get("dropout_p", 0) or 0) > 0
                status, msg = run_sample(op, sample, sample_random, want_grad)
                counts[status] += 1
                if status not in ("pass", "skip") and key not in messages:
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


def classify(entry):
    """'pass' if every float32 forward sample passes without fallback, else the first problem."""
    if "crash" in entry:
        return "crash"
    f32 = entry["dtypes"].get("float32")
    if f32 is None or "forward" not in f32:
        return "no float32"
    c = f32["forward"]
    for status in ("error", "mismatch", "fallback"):
        if c[status]:
            return status
    if c["pass"] == 0:
        return "no samples"
    return "pass"


def summarize(results, names):
    totals = {}
    for n in names:
        k = classify(results[n])
        totals[k] = totals.get(k, 0) + 1
    sample_totals = {"pass": 0, "fallback": 0, "mismatch": 0, "error": 0, "skip": 0}
    for r in results.values():
        for d in r["dtypes"].values():
            for key in ("forward", "backward"):
                for s, v in d.get(key, {}).items():
                    sample_totals[s] += v
    return totals, sample_totals


def write_markdown(path, results, names, dtypes, totals, sample_totals):
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
        "no op fell back to the CPU.",
        "",
        "## Totals",
        "",
        f"* OpInfo entries: {entries}",
        f"* entries passing all float32 forward samples without fallback: **{passing}** "
        f"({100.0 * passing / entries:.1f}% of all entries, {100.0 * passing / max(with_f32, 1):.1f}% of the "
        f"{with_f32} entries that support float32)",
    ]
    for k in ("fallback", "mismatch", "error", "crash", "no samples", "no float32"):
        lines.append(f"* entries whose worst float32 forward result is `{k}`: {totals.get(k, 0)}")
    lines.append(
        "* samples (all dtypes, forward and backward): "
        + ", ".join(f"{k} {v}" for k, v in sample_totals.items())
    )
    lines += ["", "## Per op", "", "| op | float32 fwd | float32 bwd | " + " | ".join(d for d in dtypes if d != "float32")
              + " | first problem |", "|---|---|---|" + "---|" * (len(dtypes) - 1) + "---|"]

    def cell(c):
        if not c:
            return ""
        bad = [f"{k[0]}{v}" for k, v in c.items() if k not in ("pass", "skip") and v]
        return f"{c['pass']}/{sum(v for k, v in c.items() if k != 'skip')}" + (" " + " ".join(bad) if bad else "")

    for n in sorted(names):
        r = results[n]
        if "crash" in r:
            lines.append(f"| {n} | crash | | " + " | " * (len(dtypes) - 1) + r["crash"].replace("|", "/") + " |")
            continue
        d = r["dtypes"]
        f32 = d.get("float32", {})
        others = [cell(d.get(x, {}).get("forward")) for x in dtypes if x != "float32"]
        msg = ""
        for x in dtypes:
            m = d.get(x, {}).get("messages")
            if m:
                msg = f"{x} " + "; ".join(f"{k}: {v}" for k, v in m.items())
                break
        msg = msg.replace("|", "/").replace("\n", " ")[:240]
        lines.append(f"| {n} | {cell(f32.get('forward'))} | {cell(f32.get('backward'))} | " + " | ".join(others)
                     + f" | {msg} |")
    lines += ["", "Cell format: passing samples / compared samples, then counts of f(allback), m(ismatch),",
              "e(rror). Empty: the OpInfo does not support that dtype.", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="*", help="OpInfo entry names (default: all)")
    parser.add_argument("--dtypes", nargs="*", default=DEFAULT_DTYPES)
    parser.add_argument("--no-backward", action="store_true")
    parser.add_argument("--json", default=os.path.join(ROOT, "build", "opinfo_report.json"))
    parser.add_argument("--markdown", default=os.path.join(ROOT, "docs", "op_coverage.md"))
    parser.add_argument("--worker-timeout", type=int, default=3600)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--progress", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        worker_main(args.ops, args.dtypes, not args.no_backward, args.progress)
        return
    names = args.ops or all_entry_names()
    started = time.time()
    results = run_sweep(names, args.dtypes, not args.no_backward, args.worker_timeout)
    totals, sample_totals = summarize(results, names)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"dtypes": args.dtypes, "totals": totals, "samples": sample_totals,
                   "seconds": time.time() - started, "ops": results}, f, indent=1, sort_keys=True)
    if args.markdown:
        write_markdown(args.markdown, results, names, args.dtypes, totals, sample_totals)
    print(json.dumps({"entries": len(names), "totals": totals, "samples": sample_totals,
                      "seconds": round(time.time() - started)}))


if __name__ == "__main__":
    main()
