"""all_reduce bus bandwidth on 2 ranks, float32 tensors of 1 KB to 256 MB: tpu_dist against Gloo on
CPU tensors, side by side.

    python benchmarks/dist_allreduce.py [--rounds R] [--max-mb 256]

* Processes (how the XLA CPU plugin runs ranks across processes): two processes in one
  ``"cpu:gloo,tpu:tpu_dist"`` process group, so Gloo on CPU tensors and tpu_dist's host transport
  (device -> host -> Gloo -> device) run in the same processes, round after round; the host
  transport also without its cross-rank signature check (TORCH_TPU_DIST_CHECK=0, a second group).
* Threads (the device transport's setting on this plugin): two ranks as threads of one process,
  one tpu device each, Gloo on CPU tensors against the device transport (one XLA all_reduce
  program over both devices).

Each timing runs `iters` all_reduces back to back and waits for the last result. Ratios are taken
within each round and their median is reported. Bus bandwidth = size * 2 (n - 1) / n / time.
Targets: the host transport within 1.5x of Gloo's time at >= 1 MB; the device transport at least
as fast as Gloo.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TORCH_TPU_CPU_DEVICE_COUNT", "2")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIZES = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


def _iters(size):
    return max(4, min(100, (32 << 20) // size))


def _sync(t):
    if t.device.type == "tpu":
        torch.tpu.synchronize(t.device)


def measure(rank, contenders, sizes, rounds):
    """{name: {size: [seconds per all_reduce, per round]}}; contenders: name -> (device, group)."""
    out = {name: {} for name in contenders}
    cpu_sync = torch.zeros(1)
    for size in sizes:
        tensors = {name: torch.ones(size // 4, device=dev) for name, (dev, _) in contenders.items()}
        for name, t in tensors.items():  # warm-up: connections, compilation
            for _ in range(2):
                dist.all_reduce(t, group=contenders[name][1])
            _sync(t)
        iters = _iters(size)
        for _ in range(rounds):
            for name, t in tensors.items():
                dist.all_reduce(cpu_sync)  # both ranks start together
                start = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(t, group=contenders[name][1])
                _sync(t)
                out[name].setdefault(size, []).append((time.perf_counter() - start) / iters)
    return out


def _process_rank(rank, store_path, result_path, sizes, rounds):
    import torch_tpu  # noqa: F401

    store = dist.FileStore(store_path, 2)
    dist.init_process_group("cpu:gloo,tpu:tpu_dist", rank=rank, world_size=2, store=store)
    os.environ["TORCH_TPU_DIST_CHECK"] = "0"
    unchecked = dist.new_group([0, 1], backend="tpu_dist")
    contenders = {"gloo (cpu)": ("cpu", None), "tpu_dist host": ("tpu", None),
                  "tpu_dist host, no check": ("tpu", unchecked)}
    result = measure(rank, contenders, sizes, rounds)
    dist.destroy_process_group()
    if rank == 0:
        torch.save(result, result_path)


def run_processes(sizes, rounds):
    with tempfile.TemporaryDirectory() as d:
        result_path = os.path.join(d, "result.pt")
        mp.spawn(_process_rank, args=(os.path.join(d, "store"), result_path, sizes, rounds), nprocs=2)
        return torch.load(result_path)


def run_threads(sizes, rounds):
    import torch_tpu  # noqa: F401
    from torch_tpu.distributed import run_in_threads

    contenders = {"gloo (cpu), threads": ("cpu", None), "tpu_dist device": ("tpu", None)}
    return run_in_threads(lambda rank, n: measure(rank, contenders, sizes, rounds), 2, timeout=1800,
                          backend="cpu:gloo,tpu:tpu_dist")[0]


def _label(size):
    return f"{size >> 20} MB" if size >= 1 << 20 else f"{size >> 10} KB"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--max-mb", type=int, default=256)
    args = parser.parse_args()
    sizes = [s for s in SIZES if s <= args.max_mb << 20]

    timings = {**run_processes(sizes, args.rounds), **run_threads(sizes, args.rounds)}

    def busbw(seconds, size):
        return size * 2 * (2 - 1) / 2 / seconds / 1e9  # GB/s

    def ratio(a, b, size):  # median over rounds of time(a) / time(b)
        return statistics.median(x / y for x, y in zip(timings[a][size], timings[b][size]))

    table = [["size", "Gloo GB/s", "host GB/s", "host / Gloo time", "host no-check / Gloo",
              "Gloo (threads) GB/s", "device GB/s", "device / Gloo time"]]
    summary = {}
    for size in sizes:
        med = {name: statistics.median(v[size]) for name, v in timings.items()}
        summary[size] = {
            "busbw_GBps": {name: busbw(t, size) for name, t in med.items()},
            "host_over_gloo": ratio("tpu_dist host", "gloo (cpu)", size),
            "host_nocheck_over_gloo": ratio("tpu_dist host, no check", "gloo (cpu)", size),
            "device_over_gloo": ratio("tpu_dist device", "gloo (cpu), threads", size),
        }
        s = summary[size]
        table.append([_label(size), f"{s['busbw_GBps']['gloo (cpu)']:.3f}", f"{s['busbw_GBps']['tpu_dist host']:.3f}",
                      f"{s['host_over_gloo']:.2f}", f"{s['host_nocheck_over_gloo']:.2f}",
                      f"{s['busbw_GBps']['gloo (cpu), threads']:.3f}", f"{s['busbw_GBps']['tpu_dist device']:.3f}",
                      f"{s['device_over_gloo']:.2f}"])
    big = [s for s in sizes if s >= 1 << 20]
    worst_host = max(summary[s]["host_over_gloo"] for s in big) if big else float("nan")
    worst_device = max(summary[s]["device_over_gloo"] for s in sizes)
    notes = [f"Target: host transport within 1.5x of Gloo's time at >= 1 MB (worst {worst_host:.2f}x: "
             f"{'met' if worst_host <= 1.5 else 'NOT met'}); device transport at least as fast as Gloo "
             f"(worst {worst_device:.2f}x: {'met' if worst_device <= 1.0 else 'NOT met'}).",
             "Processes: Gloo and the host transport share two processes (`cpu:gloo,tpu:tpu_dist`), rounds "
             "interleaved. Threads: two ranks in one process, one tpu device each (the device transport's "
             "setting on the XLA CPU plugin), Gloo on CPU tensors in the same threads.",
             "Ratios: median over rounds of the time ratio within a round. Plot: `dist_allreduce.svg`.",
             "", "Run: `.venv/bin/python benchmarks/dist_allreduce.py`."]
    from _results import RESULTS, write
    from _svg_plot import line_chart

    write("dist_allreduce", "all_reduce bus bandwidth, 2 ranks, float32",
          {"sizes": {str(k): v for k, v in summary.items()}, "seconds": {n: {str(k): v for k, v in t.items()}
                                                                          for n, t in timings.items()},
           "rounds": args.rounds}, table, notes)
    os.makedirs(RESULTS, exist_ok=True)
    line_chart(os.path.join(RESULTS, "dist_allreduce.svg"), "all_reduce bus bandwidth, 2 ranks (float32)",
               "message size", "GB/s",
               {name: [(s, summary[s]["busbw_GBps"][name]) for s in sizes] for name in timings},
               x_ticks=[(s, _label(s)) for s in sizes])


if __name__ == "__main__":
    main()
