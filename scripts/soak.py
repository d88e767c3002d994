"""Soak: a long training run of the main job's model (the Llama-style language model of
examples/train_llama.py) in each eager mode and compiled, checking that nothing grows once warm:

  .venv/bin/python scripts/soak.py [--steps 5000] [--modes strict,fused,debug,compile]
                                    [--dim 128] [--layers 2] [--seq 64] [--batch 16] [--json PATH]

Each mode runs in a fresh process (its figures are its own). After a warm-up (a tenth of the
steps, at least 100 - compiled code's process settles later - and at most half) it records,
then checks at the end:
  - memory_allocated() unchanged (the live tpu tensors: weights, gradients, optimizer state);
  - the process's resident memory grown by less than 5% (sampled every 10 steps: the median of
    the last third of the samples against the first third's);
  - the OS thread count unchanged;
  - no compile after warm-up, and the in-memory program cache within its bound
    (TORCH_TPU_CACHE_MEMORY_ENTRIES, default 2048).
The loss is read every 10 steps, as a training loop logs it. Prints a table; exits 1 if a check
fails. CI runs a 300-step version (tests/test_soak.py); this command is the long one.
"""

import argparse
import ctypes
import json
import os
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODES = ("strict", "fused", "debug", "compile")


def rss_bytes():
    """Resident bytes of live memory: the C allocator first returns the free pages it keeps (large
    programs' temporaries come and go), so what remains is what the process holds."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def threads():
    return len(os.listdir("/proc/self/task"))


def soak_one(args):
    """The child: trains for args.steps steps in args.mode and prints its figures as JSON."""
    sys.path.insert(0, str(ROOT))
    import torch
    from tqdm import tqdm

    import torch_tpu  # noqa: F401
    from models.llama import Llama, LlamaConfig

    eager = {"strict": "STRICT", "fused": "FUSED", "debug": "DEBUG", "compile": "STRICT"}[args.mode]
    torch.tpu.eager_mode = getattr(torch.tpu.EagerMode, eager)
    torch.manual_seed(0)
    cfg = LlamaConfig(dim=args.dim, n_layers=args.layers, hidden_dim=4 * args.dim, max_seq_len=args.seq)
    model = Llama(cfg).to("tpu")
    forward = torch.compile(model, backend="tpu") if args.mode == "compile" else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), generator=g) for _ in range(8)]
    warm = min(max(100, args.steps // 10), args.steps // 2)
    base, losses, rss = None, [], []
    for step in tqdm(range(args.steps), desc=f"soak {args.mode}", mininterval=2, file=sys.stderr, leave=False):
        if step == warm:
            torch.tpu.synchronize()
            stats = torch.tpu.compilation_cache_stats()
            base = {"allocated": torch.tpu.memory_allocated(), "rss": rss_bytes(), "threads": threads(),
                    "compiles": stats["compiles"] + stats["disk_loads"], "entries": stats["entries"]}
        batch = batches[step % len(batches)].to("tpu")
        loss = forward(batch[:, :-1], batch[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            losses.append(loss.item())
            if step > warm:
                rss.append(rss_bytes())
        del batch, loss
    torch.tpu.synchronize()
    stats = torch.tpu.compilation_cache_stats()
    end = {"allocated": torch.tpu.memory_allocated(), "rss": rss_bytes(), "threads": threads(),
           "compiles": stats["compiles"] + stats["disk_loads"], "entries": stats["entries"]}
    # Resident memory: the median of the last third of the samples against the first third's, so
    # a one-off jump of the C allocator does not read as growth while a leak (a trend) does.
    third = max(1, len(rss) // 3)
    base["rss"], end["rss"] = statistics.median(rss[:third]), statistics.median(rss[-third:])
    print(json.dumps({"mode": args.mode, "steps": args.steps, "warm_up": warm, "base": base, "end": end,
                      "first_loss": losses[0], "last_loss": losses[-1]}))


def verdicts(r, entries_bound):
    base, end = r["base"], r["end"]
    growth = end["rss"] / base["rss"] - 1
    return {
        "memory_allocated flat": end["allocated"] == base["allocated"],
        "RSS growth < 5%": growth < 0.05,
        "threads flat": end["threads"] == base["threads"],
        "no compile after warm-up": end["compiles"] == base["compiles"],
        "program cache bounded": end["entries"] <= entries_bound,
        "loss finite": r["last_loss"] == r["last_loss"],
    }, growth


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.mode = args.child
        return soak_one(args)
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; choose from {', '.join(MODES)}")
    bound = int(os.environ.get("TORCH_TPU_CACHE_MEMORY_ENTRIES", "2048"))
    results, ok = [], True
    print(f"{'mode':8} {'steps':>6} {'allocated MiB':>14} {'RSS MiB (growth)':>20} {'threads':>8} "
          f"{'compiles after warm-up':>23} {'cache entries':>14}  verdict")
    for mode in modes:
        cmd = [sys.executable, __file__, "--child", mode] + [
            f"--{k}={getattr(args, k)}" for k in ("steps", "dim", "layers", "seq", "batch")]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            print(f"{mode:8} failed (exit {proc.returncode})")
            ok = False
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        checks, growth = verdicts(r, bound)
        r["checks"] = checks
        results.append(r)
        failed = [name for name, good in checks.items() if not good]
        ok = ok and not failed
        b, e = r["base"], r["end"]
        print(f"{mode:8} {r['steps']:>6} {b['allocated'] / 2**20:>6.1f} -> {e['allocated'] / 2**20:<6.1f} "
              f"{b['rss'] / 2**20:>7.0f} -> {e['rss'] / 2**20:<5.0f}({growth:+.1%}) {b['threads']:>3} -> {e['threads']:<3} "
              f"{e['compiles'] - b['compiles']:>23} {e['entries']:>14}  {'ok' if not failed else 'FAILED: ' + ', '.join(failed)}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
