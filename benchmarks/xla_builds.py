"""The zoo's compiled training-step programs run by two builds of XLA's CPU compiler and runtime:
the PJRT plugin torch_tpu drives (the default `fastatomstruct-xla-cpu` build) and the one inside
jaxlib (the pinned test dependency). Same StableHLO text, same inputs, same machine: the ratio
says how much of a compiled model's gap to Inductor is the plugin build's (issue 27).

    python benchmarks/xla_builds.py [--models mlp,bert,gpt,...] [--sizes small] [--rounds 7] [--no-write]

For each model, a child process runs the zoo's compiled step (`torch.compile(backend="tpu")`,
AdamW) with `TORCH_TPU_DUMP_HLO` and a fresh program cache, so every program it compiles is
written out as StableHLO. The step's graph programs (forward, backward, optimizer: the texts of
4 KB or more; per-op programs of the warm-up are left out) are then compiled by both builds in
one process - the plugin loaded into JAX as a PJRT plugin, and jaxlib's own CPU client - with
donation attributes removed and random inputs. Rounds alternate the contenders' order; each round
times single runs to completion (`block_until_ready`), and the medians are reported.
"""

import argparse
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MIN_TEXT = 4096  # graph programs; per-op programs are a few hundred bytes
CONTENDERS = ("plugin", "jaxlib")


def _dump_programs(spec, out_dir, steps=3):
    """Runs the zoo's compiled step of `spec` (name:size) in a child process that writes every
    program it compiles to `out_dir`; returns the graph programs' texts in compile order."""
    code = (
        "import sys, torch; sys.path.insert(0, %r)\n"
        "import zoo, zoo_models\n"
        "name, size = %r.split(':')\n"
        "model, inputs, target, loss_fn = zoo_models.available()[name](size, torch.Generator().manual_seed(0))\n"
        "zoo.Contender('compiled', model, inputs, target, loss_fn).run(%d)\n" % (HERE, spec, steps))
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCH_TPU_DUMP_HLO=out_dir, TORCH_TPU_CACHE_DIR=cache, HF_HUB_OFFLINE="1")
        done = subprocess.run([sys.executable, "-c", code], env=env, timeout=1200, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{spec}: the compiled step failed:\n{done.stderr[-3000:]}")
    files = sorted(glob.glob(os.path.join(out_dir, "*.mlir")), key=os.path.getmtime)
    texts = [open(f).read() for f in files]
    return [t for t in texts if len(t) >= MIN_TEXT]


DONATION = re.compile(r"\{(jax\.buffer_donor = true|tf\.aliasing_output = \d+ : i32)\}")
def random_arguments(text, rng):
    """Random host arrays for @main's parameters (read as `stablehlo_op` reads them; integers and
    booleans: zeros, a valid index)."""
    import ml_dtypes
    import numpy as np
    import torch
    from torch_tpu.kernels.stablehlo_op import main_signature

    arrays = []
    for shape, dtype in main_signature(text)[0]:
        if dtype.is_floating_point:
            values = rng.standard_normal(shape) * 0.1
            np_dtype = ml_dtypes.bfloat16 if dtype == torch.bfloat16 else torch.empty(0, dtype=dtype).numpy().dtype
            arrays.append(values.astype(np_dtype))
        else:
            arrays.append(torch.zeros(shape, dtype=dtype).numpy())
    return arrays


_DEVICES = {}


def _devices(plugin_path):
    """{contender: its JAX device}; the plugin is registered with JAX once per process."""
    if not _DEVICES:
        import jax

        if HERE not in sys.path:  # jax_plugin, beside this file (a caller may have loaded it by path)
            sys.path.insert(0, HERE)
        import jax_plugin

        jax.config.update("jax_enable_x64", True)
        _DEVICES.update(plugin=jax_plugin.device(plugin_path), jaxlib=jax.devices("cpu")[0])
    return _DEVICES


def _time_programs(texts, plugin_path, rounds, runs):
    """[(plugin seconds, jaxlib seconds, outputs agree)] per program text: medians over `rounds`
    rounds of `runs` runs each, the contenders alternating first; the outputs of the first run
    compared."""
    import jax
    import numpy as np
    from jax._src.lib import xla_client as xc

    devices = _devices(plugin_path)
    results = []
    for text in texts:
        text = DONATION.sub("", text)
        host = random_arguments(text, np.random.default_rng(0))
        runners, outputs = {}, {}
        for name, dev in devices.items():
            exe = dev.client.compile_and_load(text, xc.DeviceList((dev,)), xc.CompileOptions())
            args = [jax.device_put(a, dev) for a in host]

            def run(exe=exe, args=args):
                outs = exe.execute(args)
                for out in outs:
                    out.block_until_ready()
                return outs
            outputs[name] = [np.asarray(o) for o in run()]
            for _ in range(2):
                run()
            runners[name] = run
        agree = all(_close(a, b) for a, b in zip(outputs["plugin"], outputs["jaxlib"]))
        times = {name: [] for name in CONTENDERS}
        for r in range(rounds):
            for name in (CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]):
                for _ in range(runs):
                    start = time.perf_counter()
                    runners[name]()
                    times[name].append(time.perf_counter() - start)
        results.append((*(statistics.median(times[name]) for name in CONTENDERS), agree))
    return results


def _close(a, b):
    """The two builds' outputs agree (floating point: to float32 rounding of a program's sums)."""
    import numpy as np

    if a.shape != b.shape:
        return False
    if a.dtype.kind in "fc" or str(a.dtype) == "bfloat16":
        a, b = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(all="ignore"):  # infinities (a masked row's -inf) compare equal, quietly
            scale = max(1.0, float(np.nanmax(np.abs(b[np.isfinite(b)]), initial=0.0)))
            return bool(np.allclose(a, b, rtol=1e-3, atol=1e-4 * scale, equal_nan=True))
    return bool(np.array_equal(a, b))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma-separated zoo models (name or name:size; default: every zoo "
                                         "model whose library is installed)")
    parser.add_argument("--sizes", default="small")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=10, help="timed runs per program and round")
    parser.add_argument("--no-write", action="store_true", help="print only (no results files)")
    args = parser.parse_args()

    sys.path[:0] = [HERE, os.path.join(HERE, "..")]  # zoo_models, _results, jax_plugin; torch_tpu
    import jax_plugin

    plugin_path = jax_plugin.torch_tpu_plugin_path()
    if args.models is None:
        import zoo_models

        args.models = ",".join(zoo_models.available())
    specs = []
    for m in args.models.split(","):
        specs += [m] if ":" in m else [f"{m}:{s}" for s in args.sizes.split(",")]

    rows = [["model", "program", "plugin (ms)", "jaxlib (ms)", "plugin / jaxlib", "outputs agree"]]
    summary = {}
    for i, spec in enumerate(specs, 1):
        print(f"[{i}/{len(specs)}] {spec}: compiling the step, then timing its programs ...", flush=True)
        with tempfile.TemporaryDirectory() as out_dir:
            texts = _dump_programs(spec, out_dir)
        timed = _time_programs(texts, plugin_path, args.rounds, args.runs)
        for k, (p, j, agree) in enumerate(timed):
            rows.append([spec, f"#{k + 1} ({len(texts[k]) // 1024} KB)", f"{p * 1e3:.3f}", f"{j * 1e3:.3f}",
                         f"{p / j:.2f}x", "yes" if agree else "NO"])
        total_p, total_j = sum(t[0] for t in timed), sum(t[1] for t in timed)
        summary[spec] = {"programs": [{"plugin_s": p, "jaxlib_s": j, "outputs_agree": agree, "text_bytes": len(t)}
                                      for (p, j, agree), t in zip(timed, texts)],
                         "plugin_s": total_p, "jaxlib_s": total_j}
        rows.append([spec, "all", f"{total_p * 1e3:.3f}", f"{total_j * 1e3:.3f}", f"{total_p / total_j:.2f}x",
                     "yes" if all(t[2] for t in timed) else "NO"])
        print(" | ".join(rows[-1]), flush=True)
    ratios = [v["plugin_s"] / v["jaxlib_s"] for v in summary.values()]
    print()
    for row in rows:
        print(" | ".join(row))
    print(f"median over models, plugin / jaxlib: {statistics.median(ratios):.2f}x")
    if not args.no_write:
        import jax
        import _results

        _results.write("xla_builds", "The zoo's compiled programs under two XLA CPU builds",
                       {"args": vars(args), "jax": jax.__version__, "results": summary,
                        "median_ratio": statistics.median(ratios)}, rows,
                       notes=[f"Same StableHLO text (the compiled step's graph programs, donation removed), random "
                              f"inputs, one process: the PJRT plugin torch_tpu drives "
                              f"({os.path.basename(os.path.dirname(plugin_path))}) loaded into JAX, against "
                              f"jaxlib {jax.__version__}'s CPU client; single runs to completion, {args.rounds} "
                              "rounds alternating the order, medians. Higher than 1.00x: the plugin build is slower.",
                              f"Median over models: {statistics.median(ratios):.2f}x."])


if __name__ == "__main__":
    main()
