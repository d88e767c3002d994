"""scaled_dot_product_attention on the tpu device: the one-program lowering ("fused") against
PyTorch's math decomposition on the same device ("math", forced with sdpa_kernel(MATH), i.e. what
tpu ran before the lowering) and PyTorch CPU eager, for one attention call (forward + backward)
and for the Llama-style training step in Strict mode.

    python benchmarks/sdpa.py [--iters N] [--rounds R] [--steps S]

Contenders run in turn, R rounds; the median round is reported. Also reported: programs
executed per attention call (forward + backward), from compilation_cache_stats()["executions"].
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch_tpu  # noqa: E402,F401

import llama_step  # noqa: E402
from _results import write  # noqa: E402

# name -> (device, force the math path)
CONTENDERS = {"fused": ("tpu", False), "math": ("tpu", True), "cpu_eager": ("cpu", False)}

# name -> (q shape, kv shape, kwargs)
SHAPES = {
    "causal 4x8x128x64": ((4, 8, 128, 64), (4, 8, 128, 64), {"is_causal": True}),
    "gqa 4x8(2)x128x64": ((4, 8, 128, 64), (4, 2, 128, 64), {"is_causal": True, "enable_gqa": True}),
}


def backend(force_math):
    return sdpa_kernel([SDPBackend.MATH]) if force_math else contextlib.nullcontext()


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def attention_call(device, force_math, q_shape, kv_shape, kwargs):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=g).to(device).requires_grad_() for s in (q_shape, kv_shape, kv_shape))
    grad = torch.randn(q_shape, generator=g).to(device)

    def call():
        with backend(force_math):
            out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        torch.autograd.grad(out, (q, k, v), grad)
        sync(device)

    return call


def time_rounds(calls, iters, rounds):
    """Median seconds per call: (wall clock, process CPU time over all threads). CPU time is the
    steadier measure on a shared machine; wall time is what a user waits."""
    wall = {name: [] for name in calls}
    cpu = {name: [] for name in calls}
    for call in calls.values():  # warm-up: compiles
        call()
        call()
    for _ in range(rounds):
        for name, call in calls.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(iters):
                call()
            wall[name].append((time.perf_counter() - start) / iters)
            cpu[name].append((time.process_time() - start_cpu) / iters)
    return ({name: statistics.median(v) for name, v in wall.items()},
            {name: statistics.median(v) for name, v in cpu.items()})


def programs_per_call(call):
    torch.tpu.synchronize()
    before = torch.tpu.compilation_cache_stats()["executions"]
    call()
    return torch.tpu.compilation_cache_stats()["executions"] - before


def llama_steps(steps, rounds, size):
    calls = {}
    for name, (device, force_math) in CONTENDERS.items():
        step = llama_step.make(device, size)

        def run(step=step, force_math=force_math):
            with backend(force_math):
                for _ in range(steps):
                    step()

        calls[name] = run
    wall, cpu = time_rounds(calls, 1, rounds)
    return {name: t / steps for name, t in wall.items()}, {name: t / steps for name, t in cpu.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--size", default="main", choices=sorted(llama_step.SIZES))
    args = parser.parse_args()

    data = {"attention_ms": {}, "attention_cpu_ms": {}, "programs_per_call": {}}
    table = [["workload", "fused ms (CPU ms)", "math on tpu ms (CPU ms)", "CPU eager ms (CPU ms)",
              "math / fused wall (CPU)", "programs fused / math"]]

    def row(label, wall, cpu, digits, programs=""):
        cell = lambda n: f"{1e3 * wall[n]:.{digits}f} ({1e3 * cpu[n]:.{digits}f})"  # noqa: E731
        table.append([label, cell("fused"), cell("math"), cell("cpu_eager"),
                      f"{wall['math'] / wall['fused']:.2f}x ({cpu['math'] / cpu['fused']:.2f}x)", programs])
        print(table[-1], flush=True)

    for shape_name, (qs, ks, kw) in SHAPES.items():
        calls = {name: attention_call(dev, m, qs, ks, kw) for name, (dev, m) in CONTENDERS.items()}
        wall, cpu = time_rounds(calls, args.iters, args.rounds)
        programs = {name: programs_per_call(calls[name]) for name in ("fused", "math")}
        data["attention_ms"][shape_name] = {n: 1e3 * t for n, t in wall.items()}
        data["attention_cpu_ms"][shape_name] = {n: 1e3 * t for n, t in cpu.items()}
        data["programs_per_call"][shape_name] = programs
        row(f"SDPA fwd+bwd {shape_name}", wall, cpu, 2, f"{programs['fused']} / {programs['math']}")
    wall, cpu = llama_steps(args.steps, args.rounds, args.size)
    data["llama_step_ms"] = {n: 1e3 * t for n, t in wall.items()}
    data["llama_step_cpu_ms"] = {n: 1e3 * t for n, t in cpu.items()}
    row(f"Llama step ({args.size}), Strict", wall, cpu, 1)
    write("sdpa", "scaled_dot_product_attention: one program vs the math decomposition", data, table,
          notes=["fused: the sdpa_fwd/sdpa_bwd programs; math: sdpa_kernel(MATH) on tpu, the path before "
                 "the lowering; CPU eager: PyTorch's own CPU kernels. Medians of rounds; times per call "
                 "or per training step (forward, backward, AdamW, loss read)."])


if __name__ == "__main__":
    main()
