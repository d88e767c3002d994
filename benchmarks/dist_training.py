"""Data-parallel training on tpu_dist: the Llama-style training step (forward, backward, AdamW) on
2 processes with DDP and with FSDP2, against 1 process with the same per-rank batch.

    python benchmarks/dist_training.py [--size main] [--steps N] [--rounds R]

Scaling efficiency = tokens/s of 2 processes / (2 x tokens/s of 1 process). Communication share:
for DDP, the step with gradient synchronisation against the same step under ``no_sync()``
(what communication adds to the step); for both, the time tpu_dist's host-transport threads spent
copying to the host, in Gloo and copying back, per step (it overlaps the computation). All runs
use the XLA CPU plugin, one process per rank, the host transport, on this machine's cores: two
processes share the cores one process had to itself.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _rounds import wait_for_device  # noqa: E402


def _train(rank, world_size, wrapper, size, steps, rounds, warmup):
    """Median seconds per step over rounds (and per-round lists)."""
    import torch_tpu  # noqa: F401

    import llama_step
    from models.llama import Llama, LlamaConfig

    s = llama_step.SIZES[size]
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, dim=s["dim"], n_layers=2, n_heads=4, n_kv_heads=2,
                      hidden_dim=s["hidden"], max_seq_len=64)
    model = Llama(cfg).to("tpu")
    if wrapper == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    elif wrapper == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(1 + rank)
    tokens = torch.randint(0, 256, (s["batch"], s["seq"] + 1), generator=g)
    x, y = tokens[:, :-1].to("tpu"), tokens[:, 1:].to("tpu")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss.item()

    def timed(n, ctx=None):
        if world_size > 1:
            dist.barrier()
        start = time.perf_counter()
        for _ in range(n):
            if ctx is not None:
                with ctx():
                    step()
            else:
                step()
        wait_for_device("tpu")
        return (time.perf_counter() - start) / n

    for _ in range(warmup):
        step()
    if wrapper == "ddp":  # compile the no_sync variant too
        with model.no_sync():
            step()
    result = {"synced": [], "no_sync": [], "comm_busy": []}
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("tpu")) if world_size > 1 else None
    for _ in range(rounds):
        before = torch_tpu._C._dist_host_timings(backend) if backend is not None else None
        result["synced"].append(timed(steps))
        if before is not None:
            after = torch_tpu._C._dist_host_timings(backend)
            busy = sum(after[k] - before[k] for k in ("to_host", "gloo", "to_device"))
            result["comm_busy"].append(busy / steps)
        if wrapper == "ddp":
            result["no_sync"].append(timed(steps, model.no_sync))
    result["fallbacks"] = sum(torch_tpu.fallback_counts().values())
    return result


def _rank_main(rank, world_size, store_path, out_path, *args):
    import torch_tpu  # noqa: F401

    if world_size > 1:
        dist.init_process_group("tpu_dist", rank=rank, world_size=world_size,
                                store=dist.FileStore(store_path, world_size))
    result = _train(rank, world_size, *args)
    if world_size > 1:
        dist.destroy_process_group()
    torch.save(result, f"{out_path}.{rank}")


def run(world_size, wrapper, size, steps, rounds, warmup):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result")
        mp.spawn(_rank_main, args=(world_size, os.path.join(d, "store"), out, wrapper, size, steps, rounds, warmup),
                 nprocs=world_size)
        return [torch.load(f"{out}.{r}") for r in range(world_size)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="main", choices=["reference", "main"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    import llama_step

    s = llama_step.SIZES[args.size]
    tokens_per_rank = s["batch"] * s["seq"]
    single = run(1, "none", args.size, args.steps, args.rounds, args.warmup)[0]
    single_step = statistics.median(single["synced"])
    rows, data = [], {"single_process_seconds_per_step": single_step}
    for wrapper in ("ddp", "fsdp"):
        ranks = run(2, wrapper, args.size, args.steps, args.rounds, args.warmup)
        step = statistics.median(max(r["synced"][i] for r in ranks) for i in range(args.rounds))
        efficiency = (2 * tokens_per_rank / step) / (2 * tokens_per_rank / single_step)
        busy = statistics.median(statistics.median(r["comm_busy"]) for r in ranks)
        exposed = None
        if wrapper == "ddp":
            no_sync = statistics.median(max(r["no_sync"][i] for r in ranks) for i in range(args.rounds))
            exposed = max(0.0, (step - no_sync) / step)
        data[wrapper] = {"seconds_per_step": step, "scaling_efficiency": efficiency, "comm_busy_share": busy / step,
                         "exposed_comm_share": exposed, "fallbacks": [r["fallbacks"] for r in ranks],
                         "per_rank": ranks}
        rows.append([wrapper.upper() if wrapper == "ddp" else "FSDP2", f"{tokens_per_rank / single_step:.0f}",
                     f"{2 * tokens_per_rank / step:.0f}", f"{efficiency:.2f}",
                     "-" if exposed is None else f"{100 * exposed:.0f}%", f"{100 * busy / step:.0f}%"])
    table = [["wrapper", "1 process tokens/s", "2 processes tokens/s", "scaling efficiency",
              "communication added to the step", "comm threads busy / step"]] + rows
    notes = [f"Model: Llama-style, {args.size} size (dim {s['dim']}, batch {s['batch']} x {s['seq']} per rank), "
             f"AdamW; {args.rounds} rounds of {args.steps} steps after {args.warmup} warm-up steps; each step reads "
             "its loss. Seconds per step: the slower rank, median over rounds.",
             "Scaling efficiency: 2-process tokens/s over twice the 1-process tokens/s with the same per-rank "
             "batch. The two processes share this machine's 2 cores, which one process had to itself, so "
             "compute alone already halves per-process speed here; on a pod each rank has its own chip.",
             "Communication added (DDP): the synchronised step against the same step under `no_sync()`. "
             "Comm threads busy: time the host transport's threads spent copying and in Gloo, per step "
             "(overlapping the computation).",
             "", "Run: `.venv/bin/python benchmarks/dist_training.py`."]
    from _results import write

    write("dist_training", "Data-parallel training on tpu_dist: 2 processes vs 1", data, table, notes)


if __name__ == "__main__":
    main()
