"""Where a compiled training step loses to Inductor: the zoo's models (benchmarks/zoo_models.py)
with the step cut into its phases.

    python benchmarks/zoo_phases.py [--models mlp,bert:small,...] [--sizes small,medium]
                                    [--rounds 5] [--round-seconds 0.3] [--no-write]

For each model and size, in a process of its own, six contenders train copies of the same model
from the same weights on the same batch: torch.compile(backend="tpu") and Inductor, each of

- the forward alone (under no_grad),
- the forward and the backward (zero_grad, forward, backward),
- the whole step (the same, then AdamW: foreach, capturable when ours, as in zoo.py),

interleaved in rounds of about ``--round-seconds`` after a warm-up of the same loop, the loss
read once per round and the round timed until the device has run all of it. Per round, the backward is the forward-and-backward time less the forward's
(it includes what the training forward saves for the backward), the optimizer the whole step's
less the forward-and-backward's; medians over rounds. The whole step's first losses are checked
against Inductor's.

A phase's ratio is Inductor's median time over ours: above 1 ours is faster. Each phase's time
is split into our host's share: the time the loop took to issue its steps before the round's
end waited for the device (1.0: the host is the bottleneck, the programs keep up).

Writes results/zoo_phases.{json,md}.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zoo  # noqa: E402
from _rounds import wait_for_device  # noqa: E402

BACKENDS = {"compiled": ("tpu", "compile"), "inductor": ("cpu", "inductor")}
CHECK_STEPS = 3


class PhaseRunner(zoo.Trainee):
    """One backend's loop over one phase of the step, on its own copy of the model."""

    def __init__(self, backend, phase, model, inputs, target, loss_fn):
        super().__init__(*BACKENDS[backend], model, inputs, target, loss_fn, phase)

    def run(self, steps):
        """(seconds to issue `steps` steps, seconds until the device has run them all, the last loss)."""
        start = time.perf_counter()
        for _ in range(steps):
            loss = self.body(self.inputs, self.target)
        issued = time.perf_counter()
        value = loss.item()
        wait_for_device(self.device)
        return issued - start, time.perf_counter() - start, value


def run_one(name, size, rounds, round_seconds):
    """One model at one size: {"compiled forward": {"all_ms": [...], "issue_ms": [...]}, ...,
    "loss_rel_diff": ours against Inductor over the first whole steps}."""
    import torch

    import torch_tpu  # noqa: F401
    import zoo_models

    torch.manual_seed(0)
    model, inputs, target, loss_fn = zoo_models.available()[name](size, torch.Generator().manual_seed(0))
    runners = {f"{b} {p}": PhaseRunner(b, p, model, inputs, target, loss_fn) for b in BACKENDS for p in zoo.PHASES}
    first = {b: [runners[f"{b} step"].run(1)[2] for _ in range(CHECK_STEPS)] for b in BACKENDS}
    diff = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(first["compiled"], first["inductor"]))
    steps = {}
    for label, r in runners.items():
        r.run(3)
        steps[label] = max(2, min(2000, round(round_seconds / (r.run(5)[1] / 5))))
        r.run(steps[label])  # the measured loop, once, before the rounds
    out = {label: {"all_ms": [], "issue_ms": [], "steps_per_round": steps[label]} for label in runners}
    for _ in range(rounds):
        for label, r in runners.items():
            issued, total, _ = r.run(steps[label])
            out[label]["all_ms"].append(total / steps[label] * 1e3)
            out[label]["issue_ms"].append(issued / steps[label] * 1e3)
    out["loss_rel_diff"] = diff
    return out


def phase_times(res, backend):
    """{phase: median ms} for one backend, the backward and optimizer taken per round as
    differences of the measured loops; None where a loop is missing."""
    runs = {p: res.get(f"{backend} {p}", {}).get("all_ms") for p in zoo.PHASES}
    if any(v is None for v in runs.values()):
        return None
    fwd, fwd_bwd, step = runs["forward"], runs["forward+backward"], runs["step"]
    return {"forward": statistics.median(fwd),
            "backward": statistics.median(b - f for f, b in zip(fwd, fwd_bwd)),
            "optimizer": statistics.median(s - b for b, s in zip(fwd_bwd, step)),
            "step": statistics.median(step)}


def host_share(res, label):
    """Our loop's issue time over its whole time (median over rounds)."""
    run = res.get(label, {})
    if "all_ms" not in run:
        return None
    return statistics.median(i / t for i, t in zip(run["issue_ms"], run["all_ms"]))


def tabulate(results):
    """The table's rows (header first) and a summary per model, from {model: run_one's results}."""
    parts = ("forward", "backward", "optimizer", "step")
    header = (["model"] + [f"{p} ms ours / Inductor" for p in parts] + [f"{p} Inductor/ours" for p in parts]
              + [f"ours host share: {p}" for p in zoo.PHASES] + ["loss diff vs Inductor"])
    rows, summary = [header], {}
    for key, res in results.items():
        ours, theirs = phase_times(res, "compiled"), phase_times(res, "inductor")
        if ours is None or theirs is None:
            rows.append([key] + ["error"] * (len(header) - 1))
            summary[key] = None
            continue
        ratios = {p: theirs[p] / ours[p] if ours[p] > 0 and theirs[p] > 0 else None for p in parts}
        shares = {p: host_share(res, f"compiled {p}") for p in zoo.PHASES}
        summary[key] = {"ours_ms": ours, "inductor_ms": theirs, "inductor_over_ours": ratios,
                        "host_share": shares, "loss_rel_diff": res.get("loss_rel_diff")}
        rows.append([key] + [f"{ours[p]:.2f} / {theirs[p]:.2f}" for p in parts]
                    + ["n/a" if ratios[p] is None else f"{ratios[p]:.2f}" for p in parts]
                    + [zoo._fmt(shares[p]) for p in zoo.PHASES]
                    + [zoo._fmt(res.get("loss_rel_diff"), ".1e")])
    return rows, summary


def main():
    import json

    parser = zoo.model_parser(__doc__, 0.3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.one:
        name, size = args.one.split(":")
        with open(args.out, "w") as f:
            json.dump(run_one(name, size, args.rounds, args.round_seconds), f)
        return

    results = zoo.run_in_processes(__file__, zoo.configs(args.models, args.sizes), args.timeout, "zoo phases",
                                   ["--rounds", str(args.rounds), "--round-seconds", str(args.round_seconds)])
    rows, summary = tabulate(results)
    if args.no_write:
        print("\n".join(" | ".join(r) for r in rows))
        return

    done = [s for s in summary.values() if s is not None]

    def median_ratio(part):
        vals = [s["inductor_over_ours"][part] for s in done if s["inductor_over_ours"][part] is not None]
        return f"{statistics.median(vals):.2f}x over {len(vals)}" if vals else "-"

    notes = [
        "Times per step (ms), ours (torch.compile(backend=\"tpu\")) / Inductor; ratios Inductor's time over "
        "ours: above 1 ours is faster. Median ratios: " + ", ".join(
            f"{p} {median_ratio(p)}" for p in ("forward", "backward", "optimizer", "step")) + ".",
        "Forward: the loss under no_grad. Backward: the forward-and-backward loop less the forward's, per "
        "round (so it includes what the training forward saves for the backward). Optimizer: the whole "
        "step (AdamW, foreach; capturable for ours) less the forward-and-backward loop, per round.",
        "n/a: a difference at or below zero (a phase within the rounds' noise, the optimizer of the convolution "
        "models for Inductor).",
        "Host share: the time our loop took to issue its steps over the round's time, which lasts until the "
        "device has run all of them (1.00: the host is the bottleneck; lower: the programs are).",
        f"Each model and size in its own process; {args.rounds} rounds of ~{args.round_seconds} s per "
        "contender after a warm-up of the same loop, the six contenders interleaved; the first "
        f"{CHECK_STEPS} whole steps' losses of ours against Inductor's (relative difference; the Diffusers UNet rows' 7e-2 to 1e-1 is Inductor's own difference from CPU eager (`results/zoo.md`: ours within 3e-6 of CPU eager there)).",
        "", "Run: `.venv/bin/python benchmarks/zoo_phases.py " + " ".join(sys.argv[1:]) + "`.",
    ]
    from _results import write

    write("zoo_phases", "Benchmark zoo by phase: forward, backward and optimizer, compiled, ours against Inductor",
          {"results": results, "summary": summary, "rounds": args.rounds, "round_seconds": args.round_seconds},
          rows, notes)


if __name__ == "__main__":
    main()
