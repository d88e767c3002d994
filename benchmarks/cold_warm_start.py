"""Cold against warm start: a new process trains the Llama-style model for a few steps with an
empty disk cache, then another new process does the same with the cache the first one filled.

    python benchmarks/cold_warm_start.py [--steps N]

For each eager mode (Strict, Fused) it reports the compile phase - seconds spent obtaining
executables: compiling (cold) or loading them from the disk tier (warm) - and the wall time to
the end of the first step. Target: the compile phase at least 10x shorter when warm.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def child(steps):
    start = time.perf_counter()
    import torch
    import torch_tpu  # noqa: F401

    import llama_step

    step = llama_step.make("tpu")
    losses = [step()]
    first_step = time.perf_counter() - start
    losses += [step() for _ in range(steps - 1)]
    stats = torch.tpu.compilation_cache_stats()
    print(json.dumps({"first_step_seconds": first_step, "total_seconds": time.perf_counter() - start,
                      "losses": losses, "stats": stats}))


def run(mode, cache_dir, steps):
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": cache_dir,
           "TORCH_TPU_DEFER_AND_FUSE": "1" if mode == "fused" else "0"}
    r = subprocess.run([sys.executable, __file__, "--child", "--steps", str(steps)], env=env,
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        return child(args.steps)

    from _results import write

    results, table = {}, [["mode", "start", "compiles", "disk loads", "compile phase (s)", "first step (s)",
                           "cold/warm compile phase"]]
    for mode in ("strict", "fused"):
        with tempfile.TemporaryDirectory() as cache_dir:
            cold = run(mode, cache_dir, args.steps)
            warm = run(mode, cache_dir, args.steps)
        phase = {name: r["stats"]["compile_seconds"] + r["stats"]["disk_load_seconds"]
                 for name, r in (("cold", cold), ("warm", warm))}
        ratio = phase["cold"] / max(phase["warm"], 1e-9)
        same = cold["losses"] == warm["losses"]
        results[mode] = {"cold": cold, "warm": warm, "compile_phase_seconds": phase,
                         "cold_over_warm": ratio, "identical_losses": same}
        for name, r in (("cold", cold), ("warm", warm)):
            s = r["stats"]
            table.append([mode, name, s["compiles"], s["disk_loads"], f"{phase[name]:.2f}",
                          f"{r['first_step_seconds']:.2f}", f"{ratio:.1f}x" if name == "warm" else ""])
    notes = [f"Target: compile phase >= 10x shorter when warm - Strict {results['strict']['cold_over_warm']:.1f}x, "
             f"Fused {results['fused']['cold_over_warm']:.1f}x. Losses identical cold and warm: "
             f"Strict {results['strict']['identical_losses']}, Fused {results['fused']['identical_losses']}.",
             "The first-step time also includes starting Python, importing torch and building the model.",
             "", "Run: `.venv/bin/python benchmarks/cold_warm_start.py`."]
    write("cold_warm_start", "Cold vs warm start (disk tier of the compilation cache)",
          {"steps": args.steps, "modes": results}, table, notes)


if __name__ == "__main__":
    main()
