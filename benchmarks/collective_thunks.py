"""How long the collectives inside a program take, from XLA's own per-thunk trace.

A program with collectives (StableHLO text with `mhlo.num_replicas = R`, as `TORCH_TPU_DUMP_HLO`
writes it) runs as one launch on R devices of jaxlib's XLA CPU client, every replica started at
once, with random inputs; XLA's thunk trace (`--xla_cpu_enable_xprof_traceme`, collected by
`jax.profiler`) gives each collective thunk's time (its rendezvous with the other replicas and
its copies). The PJRT plugin torch_tpu drives has no profiler extension, so this is the closest
view of a collective inside a program on the CPU: the same text under a newer build of the same
compiler and runtime (`benchmarks/xla_builds.py` compares the two: ~1.05x).

    python benchmarks/collective_thunks.py --replicas 2 program.mlir [...] [--json out.json]

Prints (and writes with --json) per program: the run's wall time, and the collective thunks'
time per replica and run. Runs in a process of its own: the device count is fixed when jaxlib
starts.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# XLA's names for its collective thunks (sync, or the halves of an async pair); a thunk's
# rendezvous and waits are events nested inside it.
COLLECTIVE_THUNK = re.compile(r"^(all-gather|reduce-scatter|all-reduce|all-to-all|collective-permute|"
                              r"collective-broadcast|ragged-all-to-all)(-start|-done)?(\.\d+)?$")


def _start_jax(replicas):
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = (f"{flags} --xla_cpu_enable_xprof_traceme=true "
                               f"--xla_force_host_platform_device_count={replicas}").strip()
    import jax

    jax.config.update("jax_enable_x64", True)
    devices = jax.devices("cpu")
    if len(devices) < replicas:
        raise SystemExit(f"jaxlib's CPU client has {len(devices)} devices, {replicas} are needed "
                         "(XLA_FLAGS was read before this module set it: run it in a process of its own)")
    return devices[:replicas]


def _runner(text, devices):
    """A function that runs `text` once on every device and waits for all of it."""
    import jax
    import numpy as np
    from jax._src.lib import xla_client as xc
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from xla_builds import DONATION, random_arguments

    text = DONATION.sub("", text)
    options = xc.CompileOptions()
    options.executable_build_options.num_replicas = len(devices)
    options.executable_build_options.device_assignment = xc.DeviceAssignment.create(
        np.arange(len(devices)).reshape(len(devices), 1))
    exe = devices[0].client.compile_and_load(text, xc.DeviceList(tuple(devices)), options)
    # Each replica its own inputs; an array "replicated" over the devices carries one buffer each.
    sharding = NamedSharding(Mesh(np.array(devices), ("replica",)), PartitionSpec())
    per_device = [random_arguments(text, np.random.default_rng(seed)) for seed in range(len(devices))]
    args = [jax.make_array_from_single_device_arrays(parts[0].shape, sharding,
                                                     [jax.device_put(a, d) for a, d in zip(parts, devices)])
            for parts in zip(*per_device)]

    def run():
        for outputs in exe.execute_sharded(args).disassemble_into_single_device_arrays():
            for out in outputs:
                out.block_until_ready()
    return run


def _collective_ns(trace_dir):
    """Total nanoseconds of collective thunks in the trace under `trace_dir` (all threads)."""
    from jax._src.profiler import ProfileData

    total = 0
    for path in glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True):
        for plane in ProfileData.from_file(path).planes:
            for line in plane.lines:
                for event in line.events:
                    if COLLECTIVE_THUNK.match(event.name):
                        total += event.duration_ns
    return total


def measure(texts, replicas, runs=10, warmup=3):
    """[{"run_ms", "collective_ms", "collectives"}] per program text: the median wall time of one
    run on all replicas, and the collective thunks' time per replica and run (traced runs)."""
    import jax

    devices = _start_jax(replicas)
    results = []
    for text in texts:
        run = _runner(text, devices)
        for _ in range(warmup):
            run()
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory() as trace_dir:
            with jax.profiler.trace(trace_dir):
                for _ in range(runs):
                    run()
            collective_ns = _collective_ns(trace_dir)
        results.append({"run_ms": statistics.median(times) * 1e3,
                        "collective_ms": collective_ns / 1e6 / runs / replicas,
                        "collectives": count_collectives(text)})
    return results


def count_collectives(text):
    """How many collectives the StableHLO text holds."""
    return len(re.findall(r'"?stablehlo\.(all_gather|reduce_scatter|all_reduce|all_to_all|collective_permute|'
                          r'collective_broadcast)"?\(', text))


def measure_in_child(paths, replicas, runs=10, timeout=1800):
    """measure() in a child process (jaxlib's device count is fixed once it starts): {path: result}."""
    import subprocess

    if not paths:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "thunks.json")
        subprocess.run([sys.executable, os.path.abspath(__file__), "--replicas", str(replicas), "--runs", str(runs),
                        "--json", out, *paths], check=True, timeout=timeout, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("programs", nargs="+", help="StableHLO text files (TORCH_TPU_DUMP_HLO)")
    parser.add_argument("--replicas", type=int, required=True)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", help="write {program: result} here")
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    texts = [open(p).read() for p in args.programs]
    results = dict(zip(args.programs, measure(texts, args.replicas, args.runs)))
    for path, r in results.items():
        print(f"{os.path.basename(path)}: {r['collectives']} collectives, run {r['run_ms']:.2f} ms, "
              f"collectives {r['collective_ms']:.2f} ms per replica")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
