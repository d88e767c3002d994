"""Fused Eager against Strict Eager on the Llama-style training step (forward, backward, AdamW),
side by side in one process.

    python benchmarks/fused_vs_strict.py [--steps N] [--rounds R]

Both modes train their own copy of the same model from the same weights; after warm-up
(compilation) they alternate rounds of N steps; the median steps/s of each is reported with the
ratio. Target: Fused >= 2x Strict.
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch_tpu  # noqa: E402
from torch_tpu.execution_mode import EagerMode, mode  # noqa: E402

import llama_step  # noqa: E402
from _results import write  # noqa: E402


def measure(size, steps_per_round, rounds, warmup):
    steps = {m: llama_step.make("tpu", size) for m in (EagerMode.STRICT, EagerMode.FUSED)}
    losses = {m: [] for m in steps}
    warm_seconds = {}
    for m, step in steps.items():
        with mode(m):
            start = time.perf_counter()
            for _ in range(warmup):
                losses[m].append(step())
            warm_seconds[m.name] = time.perf_counter() - start
    rates = {m.name: [] for m in steps}
    for _ in range(rounds):
        for m, step in steps.items():
            with mode(m):
                start = time.perf_counter()
                for _ in range(steps_per_round):
                    losses[m].append(step())
                rates[m.name].append(steps_per_round / (time.perf_counter() - start))
    strict, fused = losses[EagerMode.STRICT], losses[EagerMode.FUSED]
    med = {k: statistics.median(v) for k, v in rates.items()}
    return {"steps_per_second": med, "all_steps_per_second": rates, "fused_over_strict": med["FUSED"] / med["STRICT"],
            "warmup_seconds": warm_seconds, "max_loss_difference": max(abs(a - b) for a, b in zip(strict, fused)),
            "steps_compared": len(strict)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sizes", nargs="*", default=["reference", "main"], choices=list(llama_step.SIZES))
    args = parser.parse_args()

    results = {size: measure(size, args.steps, args.rounds, args.warmup) for size in args.sizes}
    stats = torch.tpu.compilation_cache_stats()
    table = [["model size", "Strict steps/s", "Fused steps/s", "Fused / Strict", "warm-up Strict / Fused (s)",
              "largest loss difference"]]
    for size, r in results.items():
        cfg = llama_step.SIZES[size]
        table.append([f"{size} (dim {cfg['dim']}, batch {cfg['batch']}x{cfg['seq']})",
                      f"{r['steps_per_second']['STRICT']:.2f}", f"{r['steps_per_second']['FUSED']:.2f}",
                      f"{r['fused_over_strict']:.2f}",
                      f"{r['warmup_seconds']['STRICT']:.1f} / {r['warmup_seconds']['FUSED']:.1f}",
                      f"{r['max_loss_difference']:.1e}"])
    first = results[args.sizes[0]]["fused_over_strict"]
    notes = [f"Target: Fused >= 2x Strict on the reference model's step ({first:.2f}x: "
             f"{'met' if first >= 2 else 'NOT met'}).",
             f"Fused graphs compiled: {stats['fused_graph_compiles']}, replayed: {stats['fused_graph_replays']}.",
             "Each step ends with `loss.item()`, as a training loop that logs its loss does.",
             "", "Run: `.venv/bin/python benchmarks/fused_vs_strict.py`."]
    write("fused_vs_strict", "Fused vs Strict Eager: Llama-style training step",
          {"steps_per_round": args.steps, "rounds": args.rounds, "sizes": results, "target": 2.0,
           "fused_graph_compiles": stats["fused_graph_compiles"], "fused_graph_replays": stats["fused_graph_replays"]},
          table, notes)


if __name__ == "__main__":
    main()
