"""Custom JAX kernels (torch_tpu.kernels.jax_op) in Strict mode:

1. dispatch: a cached jax_op call (`x + y` written in JAX) against the built-in `a + b` on the
   same 8-element float32 tensors - the custom-op layer's own cost per call;
2. fusion: RMSNorm + matmul as one JAX kernel against the same chain of built-in ops (6 per-op
   programs) at [rows, dim] x [dim, dim] (default 128 x 256).

    python benchmarks/jax_op.py [--iters N] [--repeats R] [--rows 128] [--dim 256]

Ratios are taken within each round (contenders run back to back) and their median reported.
Needs JAX (pip install jax).
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
from torch_tpu.kernels import jax_op  # noqa: E402


@jax_op("bench::add")
def jax_add(x, y):
    return x + y


@jax_op("bench::rms_matmul")
def jax_rms_matmul(x, g, w):
    import jax
    import jax.numpy as jnp
    return (x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g) @ w


def torch_rms_matmul(x, g, w):
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g) @ w


def per_call(fn, iters):
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.tpu.synchronize()
    return (time.perf_counter() - start) / iters


def rounds(contenders, iters, repeats):
    for fn in contenders.values():
        per_call(fn, max(10, iters // 10))  # warm up (compiles)
    times = {k: [] for k in contenders}
    for _ in range(repeats):
        for k, fn in contenders.items():
            times[k].append(per_call(fn, iters))
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--dim", type=int, default=256)
    args = parser.parse_args()
    torch_tpu.execution_mode.set_mode("strict")

    a, b = torch.randn(8, device="tpu"), torch.randn(8, device="tpu")
    torch.testing.assert_close(jax_add(a, b).cpu(), (a + b).cpu())
    d = rounds({"builtin_add": lambda: a + b, "jax_op_add": lambda: jax_add(a, b)}, args.iters, args.repeats)
    d_ratio = statistics.median(j / t for j, t in zip(d["jax_op_add"], d["builtin_add"]))

    x = torch.randn(args.rows, args.dim, device="tpu")
    g = torch.randn(args.dim, device="tpu")
    w = torch.randn(args.dim, args.dim, device="tpu") / args.dim ** 0.5
    torch.testing.assert_close(jax_rms_matmul(x, g, w).cpu(), torch_rms_matmul(x, g, w).cpu(), rtol=1e-4, atol=1e-4)
    f_iters = max(20, args.iters // 20)
    f = rounds({"builtin_chain": lambda: torch_rms_matmul(x, g, w), "jax_kernel": lambda: jax_rms_matmul(x, g, w)},
               f_iters, args.repeats)
    f_ratio = statistics.median(c / k for c, k in zip(f["builtin_chain"], f["jax_kernel"]))

    med = {k: statistics.median(v) * 1e6 for k, v in {**d, **f}.items()}
    data = {"iters": args.iters, "repeats": args.repeats, "rows": args.rows, "dim": args.dim,
            "median_us_per_call": med, "jax_op_over_builtin_dispatch": d_ratio,
            "builtin_chain_over_jax_kernel": f_ratio,
            "all_us_per_call": {k: [t * 1e6 for t in v] for k, v in {**d, **f}.items()}}
    table = [["contender", "µs per call (median)", "ratio (median of rounds)"],
             ["built-in `a + b` (8 floats)", f"{med['builtin_add']:.2f}", "1.00"],
             ["jax_op `x + y` (8 floats)", f"{med['jax_op_add']:.2f}", f"{d_ratio:.2f}x built-in"],
             [f"built-in RMSNorm+matmul chain [{args.rows}x{args.dim}]", f"{med['builtin_chain']:.1f}", "1.00"],
             [f"jax_op fused RMSNorm+matmul [{args.rows}x{args.dim}]", f"{med['jax_kernel']:.1f}",
              f"chain takes {f_ratio:.2f}x the kernel's time"]]
    notes = ["A jax_op call with tensors only and no gradient to record skips torch.library's dispatch; it "
             "pays the call's spec and signature lookup in Python on top of the built-in op's path (the "
             "program itself is cached like any op's). With autograd it goes through the custom op.",
             "", "Run: `.venv/bin/python benchmarks/jax_op.py`."]
    write("jax_op", "Custom JAX kernels: dispatch and fusion (Strict mode)", data, table, notes)
    print("\n".join(" | ".join(str(c) for c in row) for row in table))


if __name__ == "__main__":
    main()
