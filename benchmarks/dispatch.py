"""Dispatch cost of a cached small op: `a + b` on two 8-element float32 tensors in Strict mode,
against the same op in PyTorch CPU eager and against re-executing the very same PJRT executable
from C++ with no framework around it (the floor).

    python benchmarks/dispatch.py [--iters N] [--repeats R]

Each round runs N ops (all finished at the end) of every contender, back to back; R rounds.
The ratios are taken within each round, between contenders that ran seconds apart under the
same host conditions, and their median is reported (this VM's single-thread speed drifts by up
to 2x within minutes, which a ratio of medians taken over different moments would carry).
Targets: tpu Strict <= 1.5x the raw PJRT floor and <= 3x PyTorch CPU eager.
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch_tpu  # noqa: E402
from _results import write  # noqa: E402


def time_loop(fn, iters):
    start = time.perf_counter()
    fn(iters)
    return (time.perf_counter() - start) / iters


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=31)
    args = parser.parse_args()
    torch_tpu.execution_mode.set_mode("strict")

    a_cpu, b_cpu = torch.randn(8), torch.randn(8)
    a, b = a_cpu.to("tpu"), b_cpu.to("tpu")
    torch.testing.assert_close((a + b).cpu(), a_cpu + b_cpu)

    def tpu_loop(n):
        for _ in range(n):
            a + b
        torch.tpu.synchronize()

    def cpu_loop(n):
        for _ in range(n):
            a_cpu + b_cpu

    def raw_loop(n):
        torch_tpu._C._record_last_program(True)
        a + b  # makes `add` the last per-op program, with these buffers
        torch_tpu._C._record_last_program(False)
        torch.tpu.synchronize()
        torch_tpu._C._replay_last_raw(n)

    for fn in (tpu_loop, cpu_loop, raw_loop):
        fn(1000)  # warm up
    times = {"tpu_strict": [], "torch_cpu_eager": [], "raw_pjrt": []}
    for _ in range(args.repeats):
        times["tpu_strict"].append(time_loop(tpu_loop, args.iters))
        times["torch_cpu_eager"].append(time_loop(cpu_loop, args.iters))
        times["raw_pjrt"].append(time_loop(raw_loop, args.iters))
    med = {k: statistics.median(v) for k, v in times.items()}
    floor_ratios = [t / f for t, f in zip(times["tpu_strict"], times["raw_pjrt"])]
    cpu_ratios = [t / c for t, c in zip(times["tpu_strict"], times["torch_cpu_eager"])]
    vs_floor = statistics.median(floor_ratios)
    vs_cpu = statistics.median(cpu_ratios)
    data = {
        "ratios_per_round": {"tpu_over_raw_pjrt": floor_ratios, "tpu_over_torch_cpu": cpu_ratios},
        "iters": args.iters, "repeats": args.repeats,
        "median_us_per_op": {k: v * 1e6 for k, v in med.items()},
        "all_us_per_op": {k: [x * 1e6 for x in v] for k, v in times.items()},
        "ratio_tpu_over_raw_pjrt": vs_floor, "ratio_tpu_over_torch_cpu": vs_cpu,
        "targets": {"tpu_over_raw_pjrt": 1.5, "tpu_over_torch_cpu": 3.0},
    }
    table = [["contender", "µs per op (median)", "tpu Strict / contender (median of rounds)"],
             ["tpu Strict eager (`a + b`)", f"{med['tpu_strict'] * 1e6:.2f}", "1.00"],
             ["raw PJRT execute, same executable (floor)", f"{med['raw_pjrt'] * 1e6:.2f}", f"{vs_floor:.2f}"],
             ["PyTorch CPU eager", f"{med['torch_cpu_eager'] * 1e6:.2f}", f"{vs_cpu:.2f}"]]
    notes = [f"Targets: <= 1.5x the raw PJRT floor ({'met' if vs_floor <= 1.5 else 'NOT met'}), "
             f"<= 3x PyTorch CPU eager ({'met' if vs_cpu <= 3 else 'NOT met'}).",
             "", "Run: `.venv/bin/python benchmarks/dispatch.py`."]
    write("dispatch", "Dispatch: a cached 8-element add", data, table, notes)


if __name__ == "__main__":
    main()
