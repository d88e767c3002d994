"""The one-program Llama training step (torch.tpu.optimizers.SingleTraceTrainer) against JAX's
jitted step of the same model, program against program, on both builds of XLA's CPU compiler and
runtime: the PJRT plugin torch_tpu drives and jaxlib's own CPU client (issue 26's "at least 1.0x
JAX"). compile_step.py compares whole steps - ours on the plugin, JAX's on jaxlib (and, as
jax_jit_plugin, on the plugin); this says how much of a gap is the programs and how much the build.

    python benchmarks/step_programs_vs_jax.py [--workloads llama_train_small llama_train] [--rounds 9]

Our program is the one a child process's single-trace step compiles (`TORCH_TPU_DUMP_HLO`); JAX's
is `jax.jit(step).lower(...)` of benchmarks/jax_llama.py. Each is compiled by both builds in this
process (xla_builds.py's runner: donation removed, random inputs, single runs to completion, rounds
alternating the order, medians).
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import xla_builds  # noqa: E402


def our_program(workload):
    """The StableHLO text of our single-trace step for `workload` (compiled in a child process)."""
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import compile_step\n"
            "step = compile_step.make(%r, 'tpu_single_trace')\n"
            "for _ in range(3): step()\n" % (HERE, workload))
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCH_TPU_DUMP_HLO=out, TORCH_TPU_CACHE_DIR=cache)
        done = subprocess.run([sys.executable, "-c", code], env=env, timeout=1200, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{workload}: the single-trace step failed:\n{done.stderr[-3000:]}")
        # The step's program; the others are the few per-op programs that set the model up.
        largest = max(glob.glob(os.path.join(out, "*.mlir")), key=os.path.getsize)
        with open(largest) as f:
            return f.read()


def jax_program(workload):
    """The StableHLO text of JAX's jitted step for `workload` (the same model and batch)."""
    import compile_step
    import jax_llama

    model = compile_step._make_model(workload)
    x, y = compile_step._tokens(1, workload)
    step = jax_llama.make_step(model, x, y, lr=3e-3, weight_decay=0.01)
    return step.jitted.lower(*step.arguments()).as_text()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", nargs="+", default=["llama_train_small", "llama_train"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--runs", type=int, default=20, help="timed runs per program and round")
    args = parser.parse_args()

    import jax_plugin

    plugin_path = jax_plugin.torch_tpu_plugin_path()
    xla_builds._devices(plugin_path)  # before JAX starts its backends
    rows = [["workload", "program", "plugin (ms)", "jaxlib (ms)", "outputs agree across builds"]]
    for workload in args.workloads:
        texts = {"ours (single trace)": our_program(workload), "JAX (jax.jit)": jax_program(workload)}
        timed = xla_builds._time_programs(list(texts.values()), plugin_path, args.rounds, args.runs)
        for name, (plugin_s, jaxlib_s, agree) in zip(texts, timed):
            rows.append([workload, name, f"{plugin_s * 1e3:.3f}", f"{jaxlib_s * 1e3:.3f}", "yes" if agree else "NO"])
        (ours_p, ours_j, _), (jax_p, jax_j, _) = timed
        print(f"{workload}: ours / JAX's program time on the plugin {ours_p / jax_p:.2f}x, on jaxlib "
              f"{ours_j / jax_j:.2f}x; JAX's program on the plugin / on jaxlib {jax_p / jax_j:.2f}x", flush=True)
    for row in rows:
        print(" | ".join(row))


if __name__ == "__main__":
    main()
