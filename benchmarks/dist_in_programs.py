"""Collectives inside programs against eager collectives, on ranks that run as threads of one
process, one XLA CPU device each (tpu_dist's device transport). Three Llama training steps:

  * tp            - tensor parallel (ColwiseParallel / RowwiseParallel on every block),
                    torch.compile(backend="tpu"), SGD;
  * fsdp          - FSDP2 (fully_shard on every block and the root), Fused Eager, AdamW;
  * fsdp_compiled - the same with every block compiled (block.compile(backend="tpu")): the
                    blocks' compute replays as compiled programs, FSDP2's all-gathers and
                    reduce-scatters run in its hooks between them, in Fused Eager.

    python benchmarks/dist_in_programs.py [--workloads tp fsdp fsdp_compiled] [--ranks 2 4] [--dim 128] [--rounds 7]
                                           [--steps 10] [--read-every 1 10]

Contenders, interleaved round by round in one run (same model, same data):
  * in programs - the collectives are inside the programs: the compiled forward and backward
                  hold them (tp, the default), or the step runs inside
                  torch.tpu.distributed.spmd_safe (fsdp, fsdp_compiled: the hooks' collectives
                  are recorded into the Fused graphs around the compiled blocks);
  * eager cut   - every collective cuts the graph and runs as a program of its own: for tp the
                  TORCH_TPU_DIST_CUT_COLLECTIVES behaviour (the graph is recorded again per
                  call), for fsdp the step outside spmd_safe (Fused Eager's default).
Each rank count runs in a child process with one device per rank, as a job of that size would
(the XLA CPU plugin keeps a compute thread per device). Each round runs --steps steps per
contender, reading the loss on the host every K steps for each K of --read-every (a read waits
for the step's programs, so how often a loop reads changes what can overlap). Reported per
contender and read pattern: median step time, collectives launched as programs of their own per
rank and step, executions (programs run, all ranks) per step, and the collective time per rank
and step with its share of the step. The
collective time is measured over a few more steps under the profiler, from the runs of the
programs that hold collectives (eager ones, or graphs with collectives inside): the wait for the
last rank to launch its part (from the trace's device events: every collective of a launch meets
all ranks' parts), plus the collective thunks' own time inside the program, from XLA's per-thunk
trace of the same program (dumped with TORCH_TPU_DUMP_HLO) replayed on as many devices of
jaxlib's CPU client, all parts launched together (collective_thunks.py; the plugin itself has no
profiler extension). On the XLA CPU plugin the ranks share this machine's cores and a collective
is a memory copy between threads: the gain is in host work (no re-recording, fewer launches and
meets), not in overlapped communication.
"""

import argparse
import contextlib
import os
import re
import statistics
import sys
import threading
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _rounds import wait_for_device  # noqa: E402

CONTENDERS = ("in programs", "eager cut")
# The ranks are threads of one process: torch's default generator is shared, so a model is built
# from the seed by one rank at a time (two interleaved initialisations would differ).
_init_lock = threading.Lock()


def _seeded(make):
    import torch

    with _init_lock:
        torch.manual_seed(0)
        return make()


def _config(args, world_size):
    from models.llama import LlamaConfig

    # Every rank holds at least one query and one key-value head.
    return LlamaConfig(vocab_size=256, dim=args.dim, n_layers=2, n_heads=max(4, world_size),
                       n_kv_heads=max(2, world_size), hidden_dim=args.dim * 4, max_seq_len=64)


def _batch(args, rank):
    import torch

    g = torch.Generator().manual_seed(1 + rank)
    tokens = torch.randint(0, 256, (args.batch, 33), generator=g)
    return tokens[:, :-1].to("tpu"), tokens[:, 1:].to("tpu")


def _training_step(model, opt, x, y, region=contextlib.nullcontext):
    """One step of `model` (returning its loss) and `opt`, inside `region()` (with update=False:
    the forward and backward only)."""
    def step(update=True):
        with region():
            loss = model(x, y)
            loss.backward()
            if update:
                opt.step()
            opt.zero_grad(set_to_none=True)
        return loss
    return step


def _tp_steps(rank, world_size, args):
    """{contender: one training step} for the compiled tensor-parallel Llama."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from models.llama import Llama, parallelize_tensor

    mesh = init_device_mesh("tpu", (world_size,))

    class CutLlama(Llama):
        # A forward of its own: Dynamo keys compiled frames by code object, so the contenders never
        # share compiled graphs (one captured with collectives inside, one cut at each).
        def forward(self, *inputs):
            return super().forward(*inputs)

    x, y = _batch(args, 0)  # the same batch on every rank (tensor parallel)
    steps = {}
    for name in CONTENDERS:  # one model per contender
        model = _seeded(lambda: (Llama if name == "in programs" else CutLlama)(_config(args, world_size))).to("tpu")
        parallelize_tensor(model, mesh)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
        steps[name] = _training_step(torch.compile(model, backend="tpu"), opt, x, y)
    return steps


def _fsdp_steps(rank, world_size, args, compile_blocks=False):
    """{contender: one training step} for the FSDP2 Llama in Fused Eager (its blocks compiled if asked)."""
    import torch
    from torch.distributed.fsdp import fully_shard
    from torch.tpu.distributed import spmd_safe
    from models.llama import Llama

    x, y = _batch(args, rank)  # each rank its own batch (data parallel)
    steps = {}
    for name in CONTENDERS:
        model = _seeded(lambda: Llama(_config(args, world_size))).to("tpu")
        for block in model.layers:
            fully_shard(block)
            if compile_blocks:
                block.compile(backend="tpu")
        fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        steps[name] = _training_step(model, opt, x, y, spmd_safe if name == "in programs" else contextlib.nullcontext)
    return steps


def _fsdp_compiled_steps(rank, world_size, args):
    """{contender: one training step} for the FSDP2 Llama with per-block torch.compile."""
    return _fsdp_steps(rank, world_size, args, compile_blocks=True)


WORKLOADS = {"tp": _tp_steps, "fsdp": _fsdp_steps, "fsdp_compiled": _fsdp_compiled_steps}


def run_steps(step, n, read_every):
    """Runs `step` (returning its loss) `n` times, reading the loss on the host every `read_every`
    steps and after the last, as a training loop logs it; returns the last loss. A read waits for
    the step's programs, so it ends the overlap of one step's programs with the next step's
    recording."""
    for i in range(n):
        loss = step()
        if (i + 1) % read_every == 0 and i + 1 < n:
            loss.item()
    value = loss.item()
    wait_for_device("tpu")  # the last step's programs after the loss's (the round's time includes them)
    return value


def _rank(rank, world_size, args, workload, out):
    import torch
    import torch.distributed as dist
    from torch_tpu import _C

    step_fns = WORKLOADS[workload](rank, world_size, args)

    def switch(name):
        if workload != "tp":
            return  # fsdp's contenders differ by region, not by the process-wide switch
        dist.barrier()  # both ranks are between steps: the process-wide switch changes for both
        if rank == 0:
            _C._dist_cut_collectives(name == "eager cut")
        dist.barrier()

    def steps(name, n):
        return run_steps(step_fns[name], n, args.read_every)

    times = {name: [] for name in CONTENDERS}
    eager = {name: [] for name in CONTENDERS}
    executions = {name: [] for name in CONTENDERS}
    warm_loss = {}
    for name in CONTENDERS:
        # Compiled first, forward and backward, by every rank before any runs an optimizer step:
        # Dynamo's "compiling" flag is process-wide, and an optimizer step that reads it while
        # another rank thread compiles takes its compiled-code path (ranks in processes never do).
        switch(name)
        step_fns[name](update=False)
        dist.barrier()
    for name in CONTENDERS:  # warm-up: capture and compile with the same loop
        switch(name)
        warm_loss[name] = steps(name, args.steps)
    for _ in range(args.rounds):
        for name in CONTENDERS:
            switch(name)
            before = _C._dist_collective_counts(rank)["launched"]
            ex0 = torch.tpu.compilation_cache_stats()["executions"]
            start = time.perf_counter()
            steps(name, args.steps)
            times[name].append((time.perf_counter() - start) / args.steps)
            executions[name].append((torch.tpu.compilation_cache_stats()["executions"] - ex0) / args.steps)
            eager[name].append((_C._dist_collective_counts(rank)["launched"] - before) / args.steps)
    launches = {}
    for name in CONTENDERS:  # a few steps more under the profiler: the collective programs' runs
        switch(name)
        launches[name] = _profiled(rank, lambda: steps(name, args.steps))
    switch("in programs")
    out[rank] = {name: {"step_s": statistics.median(times[name]), "round_step_s": times[name],
                        "eager_collectives": statistics.median(eager[name]),
                        "executions": statistics.median(executions[name]), "warm_loss": warm_loss[name],
                        "launches": launches[name]}
                 for name in CONTENDERS}


def _profiled(rank, run):
    """Runs `run` on every rank under the profiler (started and stopped by rank 0, between
    barriers); rank 0 returns the runs of programs with collectives, from the trace's device
    events: [(launch_id, device, start_us, program name)]; the others return None."""
    import json
    import tempfile

    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    session = profile(activities=[ProfilerActivity.PrivateUse1]) if rank == 0 else contextlib.nullcontext()
    with session:
        dist.barrier()
        run()  # ends with a read of the loss: this rank's programs have run
        dist.barrier()
    if rank != 0:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        session.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    return [(e["args"]["launch_id"], e["args"]["device"], e["ts"], e["args"].get("hlo", ""))
            for e in events if e.get("cat") == "kernel" and "launch_id" in e.get("args", {})]


def _measure(args, workload, ranks):
    """{contender: {step_s, eager_collectives, executions}} of `workload` on `ranks` rank threads
    (in this process)."""
    import torch_tpu
    from torch_tpu.distributed import run_in_threads

    out = [None] * ranks
    # The FSDP2 step runs in Fused Eager (the mode is the process's: set around all ranks).
    with torch_tpu.execution_mode.mode("fused") if workload != "tp" else contextlib.nullcontext():
        run_in_threads(lambda r, w: _rank(r, w, args, workload, out), ranks, timeout=1800)
    for o in out:  # same model, data and steps: the contenders' losses agree
        got, want = o["in programs"]["warm_loss"], o["eager cut"]["warm_loss"]
        if abs(got - want) > 1e-3 * abs(want):
            raise SystemExit(f"{workload}/{ranks}: the contenders' losses differ after the warm-up "
                             f"({got} vs {want})")
    vs_cut = speed_vs_eager_cut(out)
    result = {name: {"step_s": statistics.median(o[name]["step_s"] for o in out), "vs_eager_cut": vs_cut[name],
                     "eager_collectives": out[0][name]["eager_collectives"],
                     "executions": out[0][name]["executions"]} for name in CONTENDERS}
    for name in CONTENDERS:
        result[name].update(_collective_time(out[0][name]["launches"], ranks, args.steps))
    return result


def speed_vs_eager_cut(out):
    """{contender: speed against the eager cut} from the ranks' results: per rank, the median over
    rounds of the eager cut's step time over the contender's in the same round (the contenders
    alternate within a round, so the host's drift between rounds cancels), then the median over
    ranks."""
    return {name: statistics.median(
        statistics.median(cut / mine for cut, mine in zip(o["eager cut"]["round_step_s"], o[name]["round_step_s"]))
        for o in out) for name in CONTENDERS}


def _collective_time(launches, ranks, steps):
    """Collective time per rank and step in the profiled steps' programs with collectives
    ({"collective_wait_ms", "collective_thunks_ms"}; the thunks' part is None without a dump of
    the programs). Each launch of such a program runs on every rank's device, and its time in
    collectives is (a) the wait for the last rank to launch its part - every collective
    rendezvouses with it: the latest start minus this rank's, measured in the run - and (b) the
    collective thunks' own time, from XLA's per-thunk trace of the same program replayed on as
    many devices, all launched together (collective_thunks.py)."""
    import collections

    import collective_thunks

    by_launch = collections.defaultdict(dict)
    for launch_id, device, start_us, program in launches:
        by_launch[launch_id][device] = (start_us, program)
    complete = [parts for parts in by_launch.values() if len(parts) == ranks]  # all ranks' parts traced
    wait_us = sum(max(s for s, _ in parts.values()) - s for parts in complete for s, _ in parts.values())
    result = {"collective_wait_ms": wait_us / 1e3 / ranks / steps, "collective_thunks_ms": None}
    dump = os.environ.get("TORCH_TPU_DUMP_HLO")
    if dump:
        # (a program the cache did not load - none today - has no text to replay: left out)
        paths = [os.path.join(dump, next(iter(parts.values()))[1] + ".mlir") for parts in complete]
        paths = [p for p in paths if os.path.exists(p)]
        thunks = collective_thunks.measure_in_child(sorted(set(paths)), ranks)
        result["collective_thunks_ms"] = sum(thunks[p]["collective_ms"] for p in paths) / steps
    return result


def _measure_in_own_process(args, ranks):
    """{workload: _measure(...)} for every workload on `ranks` ranks, run by a child process with
    one device per rank. The XLA CPU plugin runs a thread per device in its compute pool (so that
    every device's part of a collective program can run at once): measured in a process made for
    more ranks, the extra threads would share the cores with the run."""
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--workloads", *args.workloads, "--ranks", str(ranks),
               "--dim", str(args.dim), "--batch", str(args.batch), "--rounds", str(args.rounds),
               "--steps", str(args.steps), "--read-every", *map(str, args.read_every), "--no-write",
               "--result-json", path]
        dump = os.path.join(tmp, "hlo")  # the programs it runs, for collective_thunks.py
        os.mkdir(dump)
        env = dict(os.environ, TORCH_TPU_CPU_DEVICE_COUNT=str(ranks), TORCH_TPU_DUMP_HLO=dump)
        done = subprocess.run(cmd, env=env, timeout=3600, stderr=subprocess.PIPE, text=True)
        # Kineto logs every start and stop of the profiler, and complains that rank 0's thread is
        # not the one that registered it (harmless: the device events are the process's).
        noise = re.compile(r"^(USDT:|ERROR: External init callback)")
        sys.stderr.write("".join(line for line in done.stderr.splitlines(keepends=True) if not noise.match(line)))
        if done.returncode != 0:
            raise SystemExit(f"the {ranks}-rank run failed (exit status {done.returncode})")
        with open(path) as f:
            return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10, help="steps per contender and round")
    parser.add_argument("--read-every", type=int, nargs="+", default=[1, 10],
                        help="read patterns: the loss read on the host every this many steps (and after each "
                             "round's last); each pattern measured in turn")
    parser.add_argument("--no-write", action="store_true", help="print only (no results files)")
    parser.add_argument("--result-json", help=argparse.SUPPRESS)  # a child's results (one rank count)
    args = parser.parse_args()

    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (resolved before the ranks start)

    if args.result_json:  # a child: one rank count, one device per rank
        import json

        (ranks,) = args.ranks
        os.environ.setdefault("TORCH_TPU_CPU_DEVICE_COUNT", str(ranks))
        results = {f"{workload} r{k}": _measure(argparse.Namespace(**{**vars(args), "read_every": k}), workload, ranks)
                   for workload in args.workloads for k in args.read_every}
        with open(args.result_json, "w") as f:
            json.dump(results, f)
        return

    import _results

    rows = [["step", "ranks", "loss read every", "contender", "step (ms, median)", "vs eager cut",
             "eager collectives / rank / step",
             "executions / step (all ranks)", "collective ms / rank / step (wait + XLA)", "collectives' share of the step"]]
    summary = {}
    measured = {}
    for ranks in args.ranks:
        print(f"{ranks} ranks: {', '.join(args.workloads)} (a process with {ranks} devices) ...", flush=True)
        measured[ranks] = _measure_in_own_process(args, ranks)
    for workload in args.workloads:
        for ranks in args.ranks:
            for k in args.read_every:
                result = measured[ranks][f"{workload} r{k}"]
                for name in CONTENDERS:
                    r = result[name]
                    summary[f"{workload}/{ranks}/r{k}/{name}"] = r
                    collective_ms = r["collective_wait_ms"] + (r["collective_thunks_ms"] or 0.0)
                    rows.append([workload, ranks, f"{k} step{'s' if k > 1 else ''}", name, f"{r['step_s'] * 1e3:.1f}",
                                 f"{r['vs_eager_cut']:.2f}x", f"{r['eager_collectives']:.0f}", f"{r['executions']:.0f}",
                                 f"{collective_ms:.1f} ({r['collective_wait_ms']:.1f} + "
                                 f"{r['collective_thunks_ms'] or 0.0:.1f})",
                                 f"{collective_ms / (r['step_s'] * 1e3):.0%}"])
    for row in rows:
        print(" | ".join(str(c) for c in row))
    if not args.no_write:
        _results.write("dist_in_programs", "Collectives inside programs: tensor-parallel and FSDP2 Llama steps",
                       {"args": vars(args), "results": summary}, rows,
                       notes=[f"Ranks as threads (one XLA CPU device each, sharing {os.cpu_count()} cores; each rank count "
                              "measured in a process of its own with one device per rank), Llama "
                              f"dim {args.dim} (2 layers), batch {args.batch} per step (tp: the same on every rank; "
                              f"fsdp: each rank its own), seq 32; {args.rounds} rounds of {args.steps} steps per "
                              f"contender, the loss read on the host every {' or every '.join(map(str, args.read_every))} "
                              "steps, and after each round (a read waits for the step's programs, which ends the "
                              "overlap of one step's programs with the next step's recording); ratio = eager-cut step "
                              "time / step time (higher is faster): per rank the median over rounds of the two step "
                              "times in the same round, then the median over ranks.",
                              "tp: compiled (torch.compile(backend=\"tpu\")), SGD; in programs = the compiled graphs "
                              "hold the collectives, eager cut = TORCH_TPU_DIST_CUT_COLLECTIVES.",
                              "fsdp: FSDP2 on every block and the root, AdamW, Fused Eager; in programs = the step "
                              "inside torch.tpu.distributed.spmd_safe, eager cut = the same step outside it.",
                              "fsdp_compiled: the same with every block compiled (block.compile(backend=\"tpu\")); "
                              "FSDP2's collectives run in its hooks, between the compiled blocks.",
                              f"collective ms = wait + XLA over {args.steps} profiled steps per contender, in the runs "
                              "of the programs that hold collectives (eager ones, or graphs with them inside): the "
                              "wait for the last rank to launch its part (the trace's device events), plus the "
                              "collective thunks' own time in the program (XLA's per-thunk trace of the same "
                              "program replayed on as many devices of jaxlib's CPU client, all parts launched "
                              "together: collective_thunks.py; alone, so a lower bound of the time in the run). "
                              "Inside a program a collective thunk also waits "
                              "for the other ranks' compute before it, on cores they share."])


if __name__ == "__main__":
    main()
