"""The training loop shared by the example scripts.

A script describes its model, data and loss as an `Example`, builds its command line with
`build_parser` (adding its own size flags) and calls `run(example, args)`, which

* sets the eager mode (--mode), bfloat16 autocast (--amp) and torch.compile(backend="tpu")
  (--compile) on the tpu device,
* trains with AdamW, showing a tqdm bar (loss, tokens/images/samples per second) on stderr and a
  `step N  loss X` line every --log-every steps on stdout,
* prints one metrics line (steps, final loss, throughput after warm-up, compiled programs, CPU
  fallbacks), optionally retrains the first steps on the CPU from the same weights (--check-cpu),
* writes log.txt, metrics.json and loss_curve.png to --out-dir (default runs/<script name>/).

The bar and the log lines are in _progress.py, data parallelism (--ddp/--fsdp) in _parallel.py.
"""

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import torch

# The scripts import the reference models from the repository's `models` package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch_tpu  # noqa: E402  (registers the tpu device)

import _parallel  # noqa: E402
from _progress import Log, ProgressBar  # noqa: E402

# A run shorter than this is too short to expect the loss to have fallen.
MIN_STEPS_TO_JUDGE = 20


@dataclass
class Example:
    name: str                                   # the model, as the bar and the plot title say it
    make_model: Callable[[], torch.nn.Module]   # a fresh model (weights from the global seed)
    make_batches: Callable[[], Iterator]        # a fresh, deterministic stream of CPU batches
    loss: Callable                              # loss(model, batch) -> scalar tensor
    unit: str                                   # what a batch counts: "tokens", "images", ...
    items_per_step: int
    describe: str                               # the model and batch, for the first log line
    baseline: Optional[float] = None            # loss of an uninformed guess (drawn in the plot)
    fsdp_units: Optional[Callable] = None       # model -> blocks sharded one by one by --fsdp


def build_parser(doc, *, steps=300, batch=16, lr=3e-3, warmup=5, log_every=25, parallel=False):
    """The flags every example shares; the script adds its own size flags."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--warmup", type=int, default=warmup, help="steps left out of the throughput")
    parser.add_argument("--log-every", type=int, default=log_every, help="print the loss every N steps")
    parser.add_argument("--device", default="tpu", help="tpu, tpu:N or cpu")
    parser.add_argument("--mode", default="strict", choices=["strict", "fused", "debug"],
                        help="eager execution mode on tpu (torch_tpu.execution_mode)")
    parser.add_argument("--amp", action="store_true", help="bfloat16 autocast")
    parser.add_argument("--compile", action="store_true",
                        help='compile the training step with torch.compile(backend="tpu")')
    parser.add_argument("--check-cpu", type=int, default=0, metavar="STEPS",
                        help="also train STEPS steps on the CPU and compare the loss curves")
    parser.add_argument("--out-dir", default=None,
                        help="where log.txt, metrics.json and loss_curve.png go (default runs/<script>)")
    if parallel:
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--ddp", action="store_true", help="DistributedDataParallel (run under torchrun)")
        group.add_argument("--fsdp", action="store_true", help="FSDP2, one unit per block (run under torchrun)")
    return parser


def script_name():
    return os.path.splitext(os.path.basename(sys.argv[0]))[0]


def to_device(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    return type(batch)(to_device(b, device) for b in batch)


def synchronize(device):
    if device.type == "tpu":
        torch.tpu.synchronize(device)


@dataclass
class Result:
    curve: torch.Tensor      # the loss of every step (float32, CPU)
    rate: float              # steps per second after the warm-up steps
    seconds: float
    warmup: int


def make_step(model, opt, example, device, args):
    """Forward under autocast, backward, optimizer step; compiled as XLA programs with --compile."""
    def train_step(batch):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp):
            loss = example.loss(model, batch)
        loss.backward()
        opt.step()
        return loss.detach()

    if args.compile and device.type == "tpu":  # forward, backward and the AdamW step compiled
        return torch.compile(train_step, backend="tpu")
    return train_step


def train(example, args, device, init_state, steps, log=None, parallel=_parallel.SINGLE):
    """Trains a fresh model from `init_state` for `steps` steps; `log` (lead rank only) gets the
    logged losses and shows the bar."""
    model = example.make_model()
    model.load_state_dict(init_state)
    model.to(device)
    model = parallel.wrap(model, example)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01,
                            capturable=args.compile and device.type == "tpu")
    train_step = make_step(model, opt, example, device, args)
    data = example.make_batches()
    bar = ProgressBar(example, steps) if log else None
    warmup = max(0, min(args.warmup, steps - 2))  # a short run still times its last step
    losses, timed_from = [], None
    start = time.perf_counter()
    for step in range(steps):
        batch = to_device(parallel.shard(next(data)), device)
        opt.zero_grad(set_to_none=True)
        loss = train_step(batch)
        if step == warmup:  # the first steps compile; time the rest
            synchronize(device)
            timed_from = time.perf_counter()
            if bar:
                bar.restart_rate(step)
        logged = step % args.log_every == 0 or step == steps - 1
        if logged:
            parallel.average(loss)  # the global batch's loss
            if log:
                log(f"step {step:4d}  loss {loss.item():.4f}")
        losses.append(loss)
        if bar:
            bar.update(step, loss)
    synchronize(device)
    end = time.perf_counter()
    if bar:
        bar.close()
    curve = torch.stack(losses).float()
    parallel.average(curve)
    timed_steps = steps - 1 - warmup
    rate = timed_steps / (end - timed_from) if timed_from and timed_steps > 0 else float("nan")
    return Result(curve.cpu(), rate, end - start, warmup)


def metrics(example, args, device, result):
    """The one-line summary and the same numbers as a dict."""
    final = float(result.curve[-1])
    numbers = {"steps": len(result.curve), "final_loss": final, "seconds": round(result.seconds, 2),
               "steps_per_s": result.rate, f"{example.unit}_per_s": result.rate * example.items_per_step,
               "warmup_steps": result.warmup}
    line = (f"metrics: {numbers['steps']} steps in {result.seconds:.1f}s | final loss {final:.4f} | "
            f"{result.rate * example.items_per_step:.0f} {example.unit}/s ({result.rate:.2f} steps/s) "
            f"after {result.warmup} warm-up steps")
    if device.type == "tpu":
        stats = torch.tpu.compilation_cache_stats()
        fallbacks = sum(torch_tpu.fallback_counts().values())
        numbers.update(compiled_programs=stats["compiles"], compile_seconds=stats["compile_seconds"],
                       disk_cache_loads=stats["disk_loads"], cpu_fallbacks=fallbacks)
        line += (f" | compiled {stats['compiles']} programs ({stats['compile_seconds']:.1f}s), "
                 f"loaded {stats['disk_loads']} from the disk cache | CPU fallbacks: {fallbacks}")
    return line, numbers


def save_loss_curve(path, example, args, device, curve, cpu_curve=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(range(len(curve)), curve.tolist(), label=f"{device}", linewidth=1)
    if cpu_curve is not None:
        ax.plot(range(len(cpu_curve)), cpu_curve.tolist(), "--", label="cpu (--check-cpu)", linewidth=1)
    if example.baseline is not None:
        ax.axhline(example.baseline, color="grey", linestyle=":", label="uninformed guess")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"{example.name}: {settings(args, device)}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def settings(args, device):
    parts = ["AdamW"]
    if args.amp:
        parts.append("bf16 autocast")
    if device.type == "tpu":
        parts.append('torch.compile(backend=tpu)' if args.compile else f"{args.mode} eager")
    return "; ".join(parts)


def run(example, args):
    """Trains `example` as the command line says, reports and writes the run's files."""
    if args.steps < 1 or args.log_every < 1:
        sys.exit("--steps and --log-every must be at least 1")
    device = torch.device(args.device)
    script = f"examples/{script_name()}.py"
    parallel = _parallel.start(args, device, script)
    lead = parallel.rank == 0  # the rank that reports
    if device.type == "tpu":
        torch_tpu.execution_mode.set_mode(args.mode)
    torch.manual_seed(0)
    model = example.make_model()
    params = sum(p.numel() for p in model.parameters())
    init_state = {k: v.clone() for k, v in model.state_dict().items()}
    out_dir = args.out_dir or os.path.join("runs", script_name())
    log = Log(os.path.join(out_dir, "log.txt") if lead else None)
    name = torch.tpu.get_device_name(device) if device.type == "tpu" else "host"
    log(f"device: {device} ({name}); {example.name} {example.describe}; {params / 1e6:.2f}M parameters; "
        f"{settings(args, device)}")
    if example.baseline is not None:
        log(f"uninformed-guess loss: {example.baseline:.3f}")
    if parallel.describe(args.batch):
        log(parallel.describe(args.batch))

    result = train(example, args, device, init_state, args.steps, log if lead else None, parallel)
    parallel.finish()
    if not lead:
        return
    line, numbers = metrics(example, args, device, result)
    log(line)
    cpu_curve = None
    if args.check_cpu and device.type == "tpu":
        steps = min(args.check_cpu, args.steps)
        cpu_curve = train(example, args, torch.device("cpu"), init_state, steps).curve
        gap = (result.curve[:steps] - cpu_curve).abs().max().item()
        numbers["cpu_check_max_loss_difference"] = gap
        log(f"CPU check over {steps} steps: largest loss difference {gap:.2e}")
    save_loss_curve(os.path.join(out_dir, "loss_curve.png"), example, args, device, result.curve, cpu_curve)
    with open(os.path.join(out_dir, "metrics.json"), "w") as f:
        json.dump(numbers, f, indent=1)
    log(f"wrote {os.path.join(out_dir, 'loss_curve.png')}")
    log.close()
    first, last = result.curve[0].item(), result.curve[-max(1, args.steps // 10):].mean().item()
    if not math.isfinite(last):
        sys.exit(f"the loss is not finite ({last})")
    if args.steps >= MIN_STEPS_TO_JUDGE and not last < first:
        sys.exit(f"training did not reduce the loss ({first:.4f} -> {last:.4f})")
