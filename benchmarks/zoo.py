"""A benchmark zoo nobody tuned for: ten kinds of model (benchmarks/zoo_models.py) at two sizes,
trained with AdamW in every execution mode, side by side.

    python benchmarks/zoo.py [--models mlp,cnn,...] [--sizes small,medium] [--rounds 5]
                             [--round-seconds 0.5] [--contenders compiled,inductor --no-write]

Contenders, each training its own copy of the same model from the same weights on the same batch:
Strict and Fused Eager with the loss read every step, every 10 steps and once per 100 (or once per
round when a round is shorter), torch.compile(backend="tpu") of the whole step (zero_grad, forward,
backward, AdamW; the batch passed as arguments), PyTorch CPU eager and Inductor (torch.compile of
the same step on the CPU). Each model and size runs in a process of its own: the
first three steps of every contender are checked against CPU eager's losses, a warm-up round runs
the same loop as the measured ones (for Fused, repeated until its fuse advisor has timed the
loop fused against op by op, at most six rounds), then the contenders take turns in rounds of about
``--round-seconds`` each, and medians of the per-round step times are reported. Fused's programs
compiled during the measured rounds are counted (a steady loop should compile nothing). Each round
is timed until the device has run all of its steps (benchmarks/_rounds.py).

Writes results/zoo.{json,md} and a plot of the ratios (results/zoo.svg); models from real
libraries (Transformers' BERT and GPT-2, a Diffusers UNet) join where they are installed.
"""

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _rounds import wait_for_device  # noqa: E402

# label -> (device, how it runs, read the loss every K steps)
CONTENDERS = {
    "strict r1": ("tpu", "strict", 1), "strict r10": ("tpu", "strict", 10), "strict r100": ("tpu", "strict", 100),
    "fused r1": ("tpu", "fused", 1), "fused r10": ("tpu", "fused", 10), "fused r100": ("tpu", "fused", 100),
    "compiled": ("tpu", "compile", 1), "cpu eager": ("cpu", "eager", 1), "inductor": ("cpu", "inductor", 1),
}
READS = (1, 10, 100)
PHASES = ("forward", "forward+backward", "step")
CHECK_STEPS = 3


def training_step(model, opt, loss_fn, kind, phase="step"):
    """`body(inputs, target) -> loss` for `model`: the whole step (zero_grad, forward, backward,
    `opt`), or only its "forward" (no grad) or "forward+backward"; compiled by us (kind "compile")
    or Inductor ("inductor"), else eager.

    The batch comes in as arguments, as a compiled training step takes it: Dynamo skips a frame
    whose locals hold no tensor, so a step reading its batch from an object would run the model's
    forward and backward eagerly after the graph break at zero_grad (for Inductor as for us), and
    only the loss and the optimizer would be compiled."""
    import torch

    if phase not in PHASES:
        raise ValueError(f"phase {phase!r}: use one of {', '.join(PHASES)}")

    def body(inputs, target):
        if phase == "forward":
            with torch.no_grad():
                return loss_fn(model(*inputs), target)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(*inputs), target)
        loss.backward()
        if phase == "step":
            opt.step()
        return loss.detach()

    if kind == "compile":
        return torch.compile(body, backend="tpu")
    if kind == "inductor":
        return torch.compile(body)
    return body


class Trainee:
    """A contender's own copy of the model and batch on `device`, its AdamW (foreach; capturable
    when we compile it) and its step body (`training_step`)."""

    def __init__(self, device, kind, model, inputs, target, loss_fn, phase="step"):
        import torch

        self.device, self.kind = device, kind
        self.model = copy.deepcopy(model).to(device)
        self.inputs = tuple(t.to(device) for t in inputs)
        self.target = target.to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, foreach=True, capturable=kind == "compile")
        self.body = training_step(self.model, self.opt, loss_fn, kind, phase)


class Contender(Trainee):
    def __init__(self, label, model, inputs, target, loss_fn):
        self.label = label
        device, kind, self.read = CONTENDERS[label]
        super().__init__(device, kind, model, inputs, target, loss_fn)
        self.losses, self.seconds, self.error = [], [], None

    def mode(self):
        from torch_tpu.execution_mode import EagerMode, mode

        return mode(EagerMode.FUSED if self.kind == "fused" else EagerMode.STRICT)

    def run(self, steps, read=None):
        """`steps` training steps, reading the loss every `read` steps and after the last; returns
        when the device has run all of them."""
        read = read or self.read
        with self.mode():
            for i in range(steps):
                loss = self.body(self.inputs, self.target)
                if (i + 1) % read == 0 or i + 1 == steps:
                    self.losses.append(loss.item())
            wait_for_device(self.device)


def _advisor_counts():
    """(iteration patterns judged, ops run strictly) by Fused Eager's fuse advisor."""
    import torch

    s = torch.tpu.compilation_cache_stats()
    return s["fused_patterns_timed"], s["fused_ops_run_strictly"]


def run_one(name, size, rounds, round_seconds, labels=tuple(CONTENDERS)):
    """One model at one size, all contenders in this process: {label: results}."""
    import torch

    import torch_tpu  # noqa: F401
    import zoo_models

    torch.manual_seed(0)
    model, inputs, target, loss_fn = zoo_models.available()[name](size, torch.Generator().manual_seed(0))
    contenders = {}
    for label in labels:
        try:
            c = Contender(label, model, inputs, target, loss_fn)
            c.run(CHECK_STEPS, read=1)  # the steps checked against the CPU (and compilation)
            contenders[label] = c
        except Exception as e:  # noqa: BLE001 - reported in the table, the others go on
            contenders[label] = None
            print(f"{name}/{size} {label}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr, flush=True)
    live = {k: c for k, c in contenders.items() if c is not None}
    reference = live["cpu eager"].losses[:CHECK_STEPS] if "cpu eager" in live else None
    steps = {}
    for label, c in live.items():  # warm-up: the measured loop, timed to size the rounds
        start = time.perf_counter()
        c.run(5)
        per_step = (time.perf_counter() - start) / 5
        steps[label] = max(2, min(2000, round(round_seconds / per_step)))
        for _ in range(6):  # Fused: until the fuse advisor has timed the loop both ways
            trials = _advisor_counts()
            c.run(steps[label])
            after = _advisor_counts()
            if after[1] == trials[1] or after[0] > trials[0]:
                break
    compiles = {label: 0 for label in live}
    for _ in range(rounds):
        for label, c in live.items():
            before = torch.tpu.compilation_cache_stats()["compiles"]
            start = time.perf_counter()
            c.run(steps[label])
            c.seconds.append((time.perf_counter() - start) / steps[label])
            compiles[label] += torch.tpu.compilation_cache_stats()["compiles"] - before
    out = {}
    for label, c in contenders.items():
        if c is None:
            out[label] = {"error": True}
            continue
        diff = (max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(c.losses[:CHECK_STEPS], reference))
                if reference else None)
        out[label] = {"ms": statistics.median(c.seconds) * 1e3, "all_ms": [s * 1e3 for s in c.seconds],
                      "steps_per_round": steps[label], "compiles_in_rounds": compiles[label],
                      "loss_rel_diff_vs_cpu": diff}
    return out


def configs(models, sizes):
    """[(name, size)] from --models and --sizes: "name" runs at every size, "name:size" at that one."""
    return [tuple(m.split(":")) if ":" in m else (m, s) for m in models.split(",")
            for s in ([None] if ":" in m else sizes.split(","))]


def run_in_processes(script, model_sizes, timeout, desc, extra_args):
    """{"name/size": results}: each model and size run by `script --one name:size --out F
    *extra_args` in a process of its own (a model that fails or times out gets {} and its log's
    tail); lines its process writes to stderr starting with "name/size " are shown."""
    from tqdm import tqdm

    results = {}
    with tempfile.TemporaryDirectory(prefix=f"{desc}_") as tmp:
        for name, size in tqdm(model_sizes, desc=desc, unit="model"):
            out = os.path.join(tmp, f"{name}_{size}.json")
            cmd = [sys.executable, os.path.abspath(script), "--one", f"{name}:{size}", "--out", out,
                   *extra_args]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
                failed = proc.returncode != 0 or not os.path.exists(out)
                log = proc.stderr
            except subprocess.TimeoutExpired:
                failed, log = True, f"timed out after {timeout} s"
            if failed:
                tqdm.write(f"{name}/{size} failed:\n{log[-2000:]}")
                results[f"{name}/{size}"] = {}
                continue
            with open(out) as f:
                results[f"{name}/{size}"] = json.load(f)
            for line in log.splitlines():
                if line.startswith(f"{name}/{size} "):
                    tqdm.write(line)
    return results


def _ratio(res, faster_than, slower):
    """time(slower) / time(faster_than) per round, median: > 1 means `faster_than` is faster."""
    a, b = res.get(slower, {}), res.get(faster_than, {})
    if "all_ms" not in a or "all_ms" not in b:
        return None
    return statistics.median(x / y for x, y in zip(a["all_ms"], b["all_ms"]))


def _fmt(x, spec=".2f"):
    return "error" if x is None else format(x, spec)


def model_parser(doc, round_seconds):
    """The options of a script that runs the zoo's models one process each (`--one` and `--out`
    are its per-process call, see run_in_processes)."""
    import zoo_models

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--models", default=",".join(zoo_models.available()),
                        help="comma-separated; name:size runs one size only")
    parser.add_argument("--sizes", default=",".join(zoo_models.SIZES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=round_seconds)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one model and size may take")
    return parser


def main():
    parser = model_parser(__doc__, 0.5)
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="comma-separated subset to run (with --no-write: a partial table)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    unknown = set(args.contenders.split(",")) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contenders {sorted(unknown)}; choose from {', '.join(CONTENDERS)}")
    if args.contenders != ",".join(CONTENDERS) and not (args.no_write or args.one):
        parser.error("a subset of --contenders makes a partial table: add --no-write")
    if args.one:
        name, size = args.one.split(":")
        with open(args.out, "w") as f:
            json.dump(run_one(name, size, args.rounds, args.round_seconds, args.contenders.split(",")), f)
        return

    results = run_in_processes(__file__, configs(args.models, args.sizes), args.timeout, "zoo",
                               ["--rounds", str(args.rounds), "--round-seconds", str(args.round_seconds),
                                "--contenders", args.contenders])
    rows, summary = tabulate(results, set(args.contenders.split(",")))
    if args.no_write:
        print("\n".join(" | ".join(r) for r in rows))
        return

    def count(key, bar):
        vals = [s[key] for s in summary.values() if s[key] is not None]
        return f"{sum(v >= bar for v in vals)} of {len(vals)}"

    compiled = [s["compiled_over_inductor"] for s in summary.values() if s["compiled_over_inductor"] is not None]
    notes = [
        "Ratios are speed ratios (the median over rounds of the slower contender's step time over the "
        "faster's within a round): above 1 the first named is faster.",
        f"Fused >= 0.97x Strict (the issue's bar): r1 {count('fused_over_strict_r1', 0.97)}, "
        f"r10 {count('fused_over_strict_r10', 0.97)}, r100 {count('fused_over_strict_r100', 0.97)} models; "
        f"compiled >= 1.0x Inductor: {count('compiled_over_inductor', 1.0)}"
        + (f", median {statistics.median(compiled):.2f}x, below 0.8x: {sum(v < 0.8 for v in compiled)}."
           if compiled else "."),
        f"Each model and size in its own process; {args.rounds} rounds of ~{args.round_seconds} s per "
        "contender after a warm-up round of the same loop; the loss read every K steps (rK) and after "
        "each round, each round timed until the device has run all of it. AdamW (foreach; capturable when compiled) on a fixed batch, float32.",
        "Loss check: the first three steps of every contender against CPU eager's (relative difference): "
        "the worst of our (tpu) contenders, and Inductor's apart - PyTorch's own compiler, not ours.",
        "", "Run: `.venv/bin/python benchmarks/zoo.py " + " ".join(sys.argv[1:]) + "` (about 10-40 minutes on 2 "
        "cores).",
    ]
    from _results import RESULTS, write

    write("zoo", "Benchmark zoo: every execution mode on models nobody tuned for",
          {"results": results, "summary": summary, "rounds": args.rounds, "round_seconds": args.round_seconds},
          rows, notes)
    plot(summary, os.path.join(RESULTS, "zoo.svg"))


def tabulate(results, ran):
    """The table's rows (header first) and a summary per model, from {model: run_one's results};
    `ran` names the contenders run (a cell needing another one is "-")."""
    header = ["model"] + [f"{c} ms" for c in CONTENDERS] + [
        "Fused/Strict r1", "r10", "r100", "compiled/Inductor", "compiled/Strict r1",
        "Fused compiles in rounds", "worst tpu loss diff vs CPU", "Inductor loss diff vs CPU"]
    rows = [header]
    summary = {}
    tpu_ran = any(CONTENDERS[label][0] == "tpu" for label in ran)

    def cell(x, *labels, spec=".2f"):
        """A table cell: "-" where a contender it needs was not run (--contenders)."""
        return "-" if not ran.issuperset(labels) else _fmt(x, spec)

    for key, res in results.items():
        ratios = {f"fused_over_strict_r{k}": _ratio(res, f"fused r{k}", f"strict r{k}") for k in READS}
        ratios["compiled_over_inductor"] = _ratio(res, "compiled", "inductor")
        ratios["compiled_over_strict"] = _ratio(res, "compiled", "strict r1")
        diffs = [v["loss_rel_diff_vs_cpu"] for label, v in res.items()
                 if CONTENDERS[label][0] == "tpu" and v.get("loss_rel_diff_vs_cpu") is not None]
        inductor_diff = res.get("inductor", {}).get("loss_rel_diff_vs_cpu")
        fused_compiles = sum(res.get(f"fused r{k}", {}).get("compiles_in_rounds", 0) for k in READS)
        summary[key] = {**ratios, "fused_compiles_in_rounds": fused_compiles,
                        "worst_loss_rel_diff": max(diffs) if diffs else None,
                        "inductor_loss_rel_diff": inductor_diff}
        rows.append([key] + [cell(res.get(c, {}).get("ms"), c) for c in CONTENDERS]
                    + [cell(ratios[f"fused_over_strict_r{k}"], f"fused r{k}", f"strict r{k}") for k in READS]
                    + [cell(ratios["compiled_over_inductor"], "compiled", "inductor"),
                       cell(ratios["compiled_over_strict"], "compiled", "strict r1"),
                       str(fused_compiles),
                       cell(summary[key]["worst_loss_rel_diff"], "cpu eager", spec=".1e") if tpu_ran else "-",
                       cell(inductor_diff, "cpu eager", "inductor", spec=".1e")])
    return rows, summary


def plot(summary, path):
    """The speed ratios per model, with parity at 1 (the chart's axes are logarithmic: the models
    sit at 2**i so they are evenly spaced)."""
    from _svg_plot import line_chart

    keys = list(summary)
    series = {label: [(2 ** i, summary[k][key]) for i, k in enumerate(keys) if summary[k][key] is not None]
              for label, key in (("Fused/Strict r1", "fused_over_strict_r1"),
                                 ("Fused/Strict r10", "fused_over_strict_r10"),
                                 ("Fused/Strict r100", "fused_over_strict_r100"),
                                 ("compiled/Inductor", "compiled_over_inductor"))}
    series["parity"] = [(1, 1.0), (2 ** max(len(keys) - 1, 1), 1.0)]
    line_chart(path, "Benchmark zoo: speed ratios (above 1: the first is faster)", "model", "speed ratio",
               series, x_ticks=[(2 ** i, k) for i, k in enumerate(keys)])


if __name__ == "__main__":
    main()
