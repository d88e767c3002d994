"""Does a collective inside a program overlap with independent compute? 2 ranks as threads of
one process (the device transport on the XLA CPU plugin's in-process devices), Fused Eager inside
``torch.tpu.distributed.spmd_safe``, so each case below is one program per rank:

* compute: a chain of float32 matmuls;
* all_reduce: one all_reduce of a tensor the compute does not touch;
* both: the two in one program (no data dependence between them);
* both, cut: the same ops outside the region, so the all_reduce is a program of its own
  (today's behaviour without spmd_safe).

    python benchmarks/dist_overlap.py [--rounds R] [--mb 32] [--n 768]

Cases are interleaved round by round, medians reported. Overlap = (compute + all_reduce - both) /
min(compute, all_reduce): 0 when the program runs them one after the other, 1 when the shorter is
hidden entirely. Writes results/dist_overlap.{json,md}.
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

os.environ.setdefault("TORCH_TPU_CPU_DEVICE_COUNT", "2")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CASES = ["compute", "all_reduce", "both", "both, cut"]


def _rank(rank, world_size, args):
    import torch_tpu  # noqa: F401
    from torch.tpu.distributed import spmd_safe

    dev = torch.device("tpu", rank)
    g = torch.Generator().manual_seed(rank)
    w = [(torch.randn(args.n, args.n, generator=g) / args.n ** 0.5).to(dev) for _ in range(args.layers)]
    x = torch.randn(args.n, args.n, generator=g).to(dev)
    grad = torch.randn((args.mb << 20) // 4, generator=g).to(dev)

    def compute():
        h = x
        for m in w:
            h = torch.tanh(h @ m)
        return h

    def run(case):
        outs = []
        region = spmd_safe() if case != "both, cut" else contextlib.nullcontext()
        with region:
            if case != "all_reduce":
                outs.append(compute())
            if case != "compute":
                dist.all_reduce(grad)
                outs.append(grad)
        for o in outs:
            o.cpu()  # wait for every result

    times = {c: [] for c in CASES}
    for case in CASES:  # warm-up: compiles
        for _ in range(2):
            run(case)
    for _ in range(args.rounds):
        for case in CASES:
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.iters):
                run(case)
            times[case].append((time.perf_counter() - start) / args.iters)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--mb", type=int, default=32, help="all_reduce size")
    parser.add_argument("--n", type=int, default=768, help="matmul size")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    import torch_tpu  # noqa: F401
    from torch_tpu.distributed import run_in_threads
    from torch_tpu.execution_mode import mode

    with mode("fused"):
        results = run_in_threads(lambda r, n: _rank(r, n, args), 2, timeout=1800)
    med = {c: statistics.median(t for res in results for t in res[c]) for c in CASES}
    overlap = (med["compute"] + med["all_reduce"] - med["both"]) / min(med["compute"], med["all_reduce"])
    rows = [["case", "ms per step (median of ranks x rounds)"]] + [[c, f"{med[c] * 1e3:.2f}"] for c in CASES]
    print("\n".join(" | ".join(r) for r in rows))
    print(f"overlap: {overlap:.2f} (0: one after the other, 1: the shorter hidden)")
    if args.no_write:
        return
    from _results import write

    notes = [f"all_reduce of {args.mb} MB float32 and {args.layers} [{args.n}x{args.n}] matmuls + tanh per rank, "
             f"2 ranks as threads, Fused Eager inside spmd_safe; medians over {args.rounds} rounds of {args.iters}.",
             f"Overlap = (compute + all_reduce - both) / min(compute, all_reduce) = **{overlap:.2f}** "
             "(0: run one after the other, 1: the shorter one hidden).",
             "See docs/design.md (collectives inside programs: overlap) for what each plugin does.",
             "", "Run: `.venv/bin/python benchmarks/dist_overlap.py`."]
    write("dist_overlap", "a collective next to independent compute in one program (2 ranks as threads)",
          {"ms": {c: med[c] * 1e3 for c in CASES}, "overlap": overlap, "args": vars(args)}, rows, notes)


if __name__ == "__main__":
    main()
