"""Train a small Llama-style language model on the `tpu` device.

    python examples/train_llama.py [--steps N] [--device tpu|cpu] [--mode strict|fused|debug] [--compile]
                                   [--amp] [--check-cpu N]
    torchrun --standalone --nproc_per_node=2 examples/train_llama.py --ddp    # or --fsdp

The corpus is synthetic but learnable: byte sequences made of short words drawn from a fixed
vocabulary with a fixed grammar (each word is usually followed by one of a few others), so the
loss falls well below the uniform-guess level of ln(256) = 5.55 within a few hundred steps.
Prints the loss as it falls, steps/s and tokens/s after warm-up, the number of compiled
executables and CPU fallbacks. --check-cpu also runs the first steps on the CPU from the same
initial weights and reports how far the two loss curves are apart.

--ddp / --fsdp (under torchrun) train data-parallel over the `tpu_dist` backend: every rank takes
its slice of each global batch, so the loss curve is the single-process one on the same batches.
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch_tpu  # noqa: E402,F401  (registers the tpu device)
from models.llama import Llama, LlamaConfig  # noqa: E402


def make_corpus(n_bytes, seed=0):
    """Bytes of a toy language: 64 words, each followed by one of 3 preferred successors."""
    g = torch.Generator().manual_seed(seed)
    letters = torch.randint(ord("a"), ord("z") + 1, (64, 6), generator=g)
    lengths = torch.randint(2, 7, (64,), generator=g)
    words = [bytes(letters[i, : lengths[i]].tolist()) for i in range(64)]
    successors = torch.randint(0, 64, (64, 3), generator=g)
    out, word = bytearray(), 0
    while len(out) < n_bytes:
        out += words[word] + b" "
        word = int(successors[word, torch.randint(0, 3, (1,), generator=g)]) if torch.rand(1, generator=g) < 0.9 \
            else int(torch.randint(0, 64, (1,), generator=g))
    return torch.tensor(list(out[:n_bytes]), dtype=torch.long)


def batches(corpus, batch, seq, generator):
    while True:
        starts = torch.randint(0, corpus.numel() - seq - 1, (batch,), generator=generator)
        rows = torch.stack([corpus[s : s + seq + 1] for s in starts.tolist()])
        yield rows[:, :-1], rows[:, 1:]


def distributed(args):
    return args.ddp or args.fsdp


def wrap_parallel(model, args):
    """DDP, or FSDP2 with one unit per block (parameters sharded across the ranks)."""
    if args.ddp:
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard

    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    return model


def train(device, args, init_state, steps, log=True):
    cfg = LlamaConfig(vocab_size=256, dim=args.dim, n_layers=args.layers, n_heads=4, n_kv_heads=2,
                      hidden_dim=args.dim * 4, max_seq_len=args.seq)
    model = Llama(cfg)
    model.load_state_dict(init_state)
    model.to(device)
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed(args) else (0, 1)
    log = log and rank == 0
    if distributed(args):
        model = wrap_parallel(model, args)
    compiled = args.compile and device.type == "tpu"
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, capturable=compiled)

    def train_step(x, y):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp):
            loss = model(x, y)
        loss.backward()
        opt.step()
        return loss.detach()

    if compiled:  # forward, backward and the AdamW step as compiled XLA programs
        train_step = torch.compile(train_step, backend="tpu")
    data = batches(make_corpus(200_000), args.batch, args.seq, torch.Generator().manual_seed(1))
    losses, timed_from, timed_steps = [], None, 0
    start = time.perf_counter()
    per_rank = args.batch // world
    for step in range(steps):
        x, y = next(data)
        x, y = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = train_step(x, y)
        if step == args.warmup:  # the first steps compile; time the rest
            torch.tpu.synchronize() if device.type == "tpu" else None
            timed_from = time.perf_counter()
        elif step > args.warmup:
            timed_steps += 1
        logged = step % args.log_every == 0 or step == steps - 1
        if distributed(args) and logged:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)  # the global batch's loss
        if log and logged:
            losses.append((step, loss.item()))
            print(f"step {step:4d}  loss {losses[-1][1]:.4f}", flush=True)
        elif not log:
            losses.append((step, loss.item()))
    if device.type == "tpu":
        torch.tpu.synchronize()
    end = time.perf_counter()
    rate = timed_steps / (end - timed_from) if timed_from and timed_steps else float("nan")
    return losses, rate, end - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--device", default="tpu")
    parser.add_argument("--mode", default="strict", choices=["strict", "fused", "debug"],
                        help="eager execution mode on tpu (torch_tpu.execution_mode)")
    parser.add_argument("--amp", action="store_true", help="bfloat16 autocast")
    parser.add_argument("--compile", action="store_true",
                        help='compile the training step with torch.compile(backend="tpu")')
    parser.add_argument("--check-cpu", type=int, default=0, metavar="STEPS",
                        help="also train STEPS steps on the CPU and compare the loss curves")
    parallel = parser.add_mutually_exclusive_group()
    parallel.add_argument("--ddp", action="store_true", help="DistributedDataParallel (run under torchrun)")
    parallel.add_argument("--fsdp", action="store_true", help="FSDP2, one unit per block (run under torchrun)")
    args = parser.parse_args()

    device = torch.device(args.device)
    if distributed(args):
        if device.type != "tpu" or "LOCAL_RANK" not in os.environ:
            sys.exit("--ddp/--fsdp train on tpu under a launcher: torchrun --standalone "
                     "--nproc_per_node=2 examples/train_llama.py --ddp")
        torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("tpu_dist")
        if args.batch % dist.get_world_size():
            sys.exit(f"--batch {args.batch} does not split over {dist.get_world_size()} ranks")
        if args.check_cpu:
            sys.exit("--check-cpu compares single-process runs; drop it with --ddp/--fsdp")
    lead = not distributed(args) or dist.get_rank() == 0  # the rank that reports
    say = print if lead else (lambda *a, **k: None)
    if device.type == "tpu":
        torch_tpu.execution_mode.set_mode(args.mode)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, dim=args.dim, n_layers=args.layers, n_heads=4, n_kv_heads=2,
                      hidden_dim=args.dim * 4, max_seq_len=args.seq)
    init_state = {k: v.clone() for k, v in Llama(cfg).state_dict().items()}
    params = sum(v.numel() for v in init_state.values())
    name = torch.tpu.get_device_name() if device.type == "tpu" else "host"
    say(f"device: {device} ({name}); Llama {args.layers} layers, dim {args.dim}, {params / 1e6:.2f}M parameters; "
          f"batch {args.batch} x {args.seq} tokens; AdamW{'; bf16 autocast' if args.amp else ''}"
          f"{'; ' + args.mode + ' eager' if device.type == 'tpu' and not args.compile else ''}"
          f"{'; torch.compile(backend=tpu)' if device.type == 'tpu' and args.compile else ''}")
    say(f"uniform-guess loss: {math.log(256):.3f}")
    if distributed(args):
        say(f"{'DDP' if args.ddp else 'FSDP2'} over {dist.get_world_size()} ranks "
              f"(tpu_dist, {torch_tpu.distributed.transport_of()} transport): "
              f"{args.batch // dist.get_world_size()} sequences per rank")

    losses, rate, seconds = train(device, args, init_state, args.steps)
    if distributed(args):
        dist.destroy_process_group()
    if not lead:
        return
    print(f"trained {args.steps} steps in {seconds:.1f}s: {rate:.2f} steps/s, "
          f"{rate * args.batch * args.seq:.0f} tokens/s after warm-up")
    if device.type == "tpu":
        stats = torch.tpu.compilation_cache_stats()
        print(f"compiled {stats['compiles']} executables ({stats['compile_seconds']:.1f}s), "
              f"loaded {stats['disk_loads']} from the disk cache; "
              f"CPU fallbacks: {sum(torch_tpu.fallback_counts().values())}")
    if args.check_cpu and device.type == "tpu":
        steps = min(args.check_cpu, args.steps)
        cpu_losses, _, _ = train(torch.device("cpu"), args, init_state, steps, log=False)
        tpu_at = dict(losses)
        gaps = [abs(tpu_at[s] - l) for s, l in cpu_losses if s in tpu_at]
        print(f"CPU check over {steps} steps: largest loss difference at logged steps {max(gaps):.2e}")
    first, last = losses[0][1], losses[-1][1]
    if not last < first:
        sys.exit(f"training did not reduce the loss ({first:.4f} -> {last:.4f})")


if __name__ == "__main__":
    main()
