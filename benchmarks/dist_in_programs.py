"""Collectives inside programs against eager collectives: a tensor-parallel Llama training step
(ColwiseParallel / RowwiseParallel on every block, torch.compile(backend="tpu"), SGD) on ranks
that run as threads of one process, one XLA CPU device each (tpu_dist's device transport).

    python benchmarks/dist_in_programs.py [--ranks 2 4] [--dim 128] [--rounds 7] [--steps 4]

Contenders, interleaved round by round in one run (same model, same data):
  * in programs - the compiled forward and backward hold their collectives (the default);
  * eager cut   - TORCH_TPU_DIST_CUT_COLLECTIVES behaviour: every collective cuts the capture, the
                  graph is recorded again per call and each collective runs as its own program.
Reported per contender: median step time, collectives launched as programs of their own per
rank and step, and executions (programs run, both ranks) per step. On the XLA CPU plugin the
ranks share this machine's cores and a collective is a memory copy between threads: the gain is
in host work (no re-recording, fewer launches and meets), not in overlapped communication.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

CONTENDERS = ("in programs", "eager cut")


def _rank(rank, world_size, args, out):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from models.llama import Llama, LlamaConfig, parallelize_tensor
    from torch_tpu import _C

    torch.manual_seed(0)
    # Every rank holds at least one query and one key-value head.
    cfg = LlamaConfig(vocab_size=256, dim=args.dim, n_layers=2, n_heads=max(4, world_size),
                      n_kv_heads=max(2, world_size), hidden_dim=args.dim * 4, max_seq_len=64)
    mesh = init_device_mesh("tpu", (world_size,))
    class CutLlama(Llama):
        # A forward of its own: Dynamo keys compiled frames by code object, so the contenders never
        # share compiled graphs (one captured with collectives inside, one cut at each).
        def forward(self, *inputs):
            return super().forward(*inputs)

    models = {}
    for name in CONTENDERS:  # one model per contender
        model = (Llama if name == "in programs" else CutLlama)(cfg).to("tpu")
        parallelize_tensor(model, mesh)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
        models[name] = (torch.compile(model, backend="tpu"), opt)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 256, (args.batch, 33), generator=g)
    x, y = tokens[:, :-1].to("tpu"), tokens[:, 1:].to("tpu")

    def switch(name):
        dist.barrier()  # both ranks are between steps: the process-wide switch changes for both
        if rank == 0:
            _C._dist_cut_collectives(name == "eager cut")
        dist.barrier()

    def steps(name, n):
        model, opt = models[name]
        for _ in range(n):
            loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss.item()

    times = {name: [] for name in CONTENDERS}
    eager = {name: [] for name in CONTENDERS}
    executions = {name: [] for name in CONTENDERS}
    for name in CONTENDERS:  # warm-up: capture and compile with the same loop
        switch(name)
        steps(name, 3)
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
    switch("in programs")
    out[rank] = {name: {"step_s": statistics.median(times[name]), "eager_collectives": statistics.median(eager[name]),
                        "executions": statistics.median(executions[name])} for name in CONTENDERS}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--no-write", action="store_true", help="print only (no results files)")
    args = parser.parse_args()
    os.environ.setdefault("TORCH_TPU_CPU_DEVICE_COUNT", str(max(args.ranks)))

    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (resolved before the ranks start)

    import _results
    from torch_tpu.distributed import run_in_threads

    rows = [["ranks", "contender", "step (ms, median)", "vs eager cut", "eager collectives / rank / step",
             "executions / step (all ranks)"]]
    summary = {}
    for ranks in args.ranks:
        out = [None] * ranks
        run_in_threads(lambda r, w: _rank(r, w, args, out), ranks, timeout=1800)
        base = statistics.median(o["eager cut"]["step_s"] for o in out)
        for name in CONTENDERS:
            step = statistics.median(o[name]["step_s"] for o in out)
            summary[f"{ranks}/{name}"] = {"step_s": step, "eager_collectives": out[0][name]["eager_collectives"],
                                          "executions": out[0][name]["executions"]}
            rows.append([ranks, name, f"{step * 1e3:.1f}", f"{base / step:.2f}x",
                         f"{out[0][name]['eager_collectives']:.0f}", f"{out[0][name]['executions']:.0f}"])
    for row in rows:
        print(" | ".join(str(c) for c in row))
    if not args.no_write:
        _results.write("dist_in_programs", "Collectives inside programs: a compiled tensor-parallel Llama step",
                       {"args": vars(args), "results": summary}, rows,
                       notes=[f"Ranks as threads (one XLA CPU device each, sharing {os.cpu_count()} cores), Llama "
                              f"dim {args.dim} (2 layers), batch {args.batch}, seq 32; ratio = eager-cut step time / "
                              "step time (higher is faster)."])


if __name__ == "__main__":
    main()
