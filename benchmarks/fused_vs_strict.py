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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    steps = {m: llama_step.make("tpu") for m in (EagerMode.STRICT, EagerMode.FUSED)}
    losses = {m: [] for m in steps}
    warm_seconds = {}
    for m, step in steps.items():
        with mode(m):
            start = time.perf_counter()
            for _ in range(args.warmup):
                losses[m].append(step())
            warm_seconds[m.name] = time.perf_counter() - start
    rates = {m.name: [] for m in steps}
    for _ in range(args.rounds):
        for m, step in steps.items():
            with mode(m):
                start = time.perf_counter()
                for _ in range(args.steps):
                    losses[m].append(step())
                rates[m.name].append(args.steps / (time.perf_counter() - start))
    strict, fused = losses[EagerMode.STRICT], losses[EagerMode.FUSED]
    max_loss_gap = max(abs(a - b) for a, b in zip(strict, fused))
    med = {k: statistics.median(v) for k, v in rates.items()}
    ratio = med["FUSED"] / med["STRICT"]
    stats = torch.tpu.compilation_cache_stats()
    data = {
        "steps_per_round": args.steps, "rounds": args.rounds,
        "steps_per_second": med, "all_steps_per_second": rates, "fused_over_strict": ratio,
        "warmup_seconds": warm_seconds, "max_loss_difference": max_loss_gap,
        "fused_graph_compiles": stats["fused_graph_compiles"], "fused_graph_replays": stats["fused_graph_replays"],
        "target": 2.0,
    }
    table = [["mode", "steps/s (median)", "warm-up (s)", "vs Strict"],
             ["Strict Eager", f"{med['STRICT']:.2f}", f"{warm_seconds['STRICT']:.1f}", "1.00"],
             ["Fused Eager", f"{med['FUSED']:.2f}", f"{warm_seconds['FUSED']:.1f}", f"{ratio:.2f}"]]
    notes = [f"Target: Fused >= 2x Strict ({'met' if ratio >= 2 else 'NOT met'}). "
             f"Largest loss difference between the two runs over {len(strict)} steps: {max_loss_gap:.2e}.",
             f"Fused graphs compiled: {stats['fused_graph_compiles']}, replayed: {stats['fused_graph_replays']}.",
             "", "Run: `.venv/bin/python benchmarks/fused_vs_strict.py`."]
    write("fused_vs_strict", "Fused vs Strict Eager: Llama-style training step", data, table, notes)


if __name__ == "__main__":
    main()
