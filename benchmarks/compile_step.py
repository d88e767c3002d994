"""torch.compile(backend="tpu") against the other ways to run the same work on this machine's CPU,
side by side in one process:

  (a) PyTorch eager on the CPU      (b) torch.compile with Inductor on the CPU
  (c) tpu Strict Eager              (d) tpu Fused Eager
  (e) torch.compile(backend="tpu")  (f) the same Llama step in JAX under jax.jit, when jax imports
  (g) torch.tpu.optimizers.SingleTraceTrainer: forward, backward and AdamW as one program
  (h) the JAX step of (f) on the PJRT plugin torch_tpu runs on (loaded into JAX as a plugin):
      JAX's program on the same build of XLA as ours - (f) runs on jaxlib's own, newer build

on the Llama-style training step at two sizes (small: dim 64, batch 2 x 32, issue 16's "small
transformer"; and the main job's dim 128, batch 16 x 64), minGPT (forward, backward, AdamW; the
loss is read on the host every step, as a training loop logs it) and ResNet-18 inference.

    python benchmarks/compile_step.py [--steps N] [--rounds R] [--workloads ...]

Each contender builds its own copy of the same model from the same weights; its first calls
(warm-up, compilation) are timed separately; then the contenders alternate rounds, each
contender running about --round-seconds (at least --steps steps) per round - the first steps
after a switch are slower for every contender - and the median steps/s of each is reported with
ratios. Targets: (e) >= 1.0x (b) and >= 2x (a) on the transformer training steps; (e) within
1.1x of (f); (g) >= 1.0x (f) and faster than (b). (h) is not a target: it tells the part of a ratio
to (f) that is XLA's build from the part that is the programs and the host paths.
"""

import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch._dynamo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch_tpu  # noqa: E402,F401
from torch_tpu.execution_mode import EagerMode, mode  # noqa: E402

import models  # noqa: E402
from _results import write  # noqa: E402
from _rounds import wait_for_device  # noqa: E402

CONTENDERS = ["eager_cpu", "inductor_cpu", "tpu_strict", "tpu_fused", "tpu_compile", "jax_jit", "tpu_single_trace",
              "jax_jit_plugin"]
# Ratios reported: (ours, reference).
RATIOS = (("tpu_compile", "inductor_cpu"), ("tpu_compile", "eager_cpu"), ("tpu_compile", "jax_jit"),
          ("tpu_single_trace", "inductor_cpu"), ("tpu_single_trace", "jax_jit"),
          ("tpu_single_trace", "jax_jit_plugin"))
# Training sizes: the main job's Llama size (dim 128, batch 16 x 64); minGPT at the same scale.
LLAMA = dict(vocab_size=256, dim=128, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=512, max_seq_len=64)
GPT = dict(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=128, dropout=0.0)
BATCH, SEQ = 16, 64
# The small transformer of issue 16 (dim <= 64): the reference size of fused_vs_strict.py.
LLAMA_SMALL = dict(LLAMA, dim=64, hidden_dim=256, max_seq_len=32)
SMALL_BATCH, SMALL_SEQ = 2, 32


def _tokens(seed, workload="llama_train"):
    batch, seq = (SMALL_BATCH, SMALL_SEQ) if workload == "llama_train_small" else (BATCH, SEQ)
    tokens = torch.randint(0, 256, (batch, seq + 1), generator=torch.Generator().manual_seed(seed))
    return tokens[:, :-1], tokens[:, 1:]


def _make_model(workload):
    torch.manual_seed(0)
    if workload == "llama_train":
        return models.Llama(models.LlamaConfig(**LLAMA))
    if workload == "llama_train_small":
        return models.Llama(models.LlamaConfig(**LLAMA_SMALL))
    if workload == "mingpt_train":
        return models.GPT(models.GPTConfig(**GPT))
    return models.resnet18().eval()


def make(workload, contender):
    """A zero-argument function running one step and returning a float read on the host."""
    model = _make_model(workload)
    if contender == "tpu_single_trace" and workload == "resnet18_infer":
        return None  # a training-step runner
    if contender in ("jax_jit", "jax_jit_plugin"):
        if workload not in ("llama_train", "llama_train_small"):
            return None
        import jax_llama

        x, y = _tokens(1, workload)
        device = _jax_plugin_device() if contender == "jax_jit_plugin" else None
        return jax_llama.make_step(model, x, y, lr=3e-3, weight_decay=0.01, device=device)
    device = "cpu" if contender in ("eager_cpu", "inductor_cpu") else "tpu"
    model = model.to(device)
    eager_mode = EagerMode.FUSED if contender == "tpu_fused" else EagerMode.STRICT
    if workload == "resnet18_infer":
        x = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(device)
        fn = model
        if contender == "inductor_cpu":
            fn = torch.compile(model)
        elif contender == "tpu_compile":
            fn = torch.compile(model, backend="tpu")

        def infer():
            with mode(eager_mode), torch.no_grad():
                return fn(x).sum().item()

        return infer
    x, y = (t.to(device) for t in _tokens(1, workload))
    if contender == "tpu_single_trace":
        # The model computes its loss from (tokens, targets): both are the step's inputs.
        trainer = torch.tpu.optimizers.SingleTraceTrainer(
            model, torch.tpu.optimizers.AdamW(lr=3e-3, weight_decay=0.01, use_bfloat16_moments=False),
            compute_loss_fn=lambda m, args, kwargs: m(*args))
        one_program_step = trainer.make_compiled_train_step((x, y))
        return lambda: one_program_step((x, y)).item()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01,
                            capturable=contender == "tpu_compile")

    def step():
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss.detach()

    if contender == "inductor_cpu":
        step = torch.compile(step)
    elif contender == "tpu_compile":
        step = torch.compile(step, backend="tpu")

    def train():
        with mode(eager_mode):
            opt.zero_grad(set_to_none=True)
            return step().item()

    return train


def _jax_plugin_device():
    """JAX's device on the PJRT plugin our runtime loaded (jax_jit_plugin's)."""
    import jax_plugin

    return jax_plugin.device(torch.tpu.get_device_properties(0).plugin)


def warm_step_seconds(fn, steps=3):
    """Seconds per step of `fn` after its warm-up."""
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - start) / steps


def measure(workload, contenders, steps_per_round, rounds, warmup, round_seconds):
    runners, warm, values = {}, {}, {}
    for c in contenders:
        try:
            fn = make(workload, c)
        except ImportError as e:  # jax not installed
            print(f"{workload}: {c} skipped ({e})")
            continue
        if fn is None:
            continue
        start = time.perf_counter()
        values[c] = [fn() for _ in range(warmup)]
        warm[c] = time.perf_counter() - start
        runners[c] = fn
    # Each contender runs for about `round_seconds` per round (at least `steps_per_round` steps):
    # the first steps after a switch between contenders are slower for every contender (the
    # other's threads and caches are still warm), and short rounds would mostly time that.
    steps = {c: max(steps_per_round, math.ceil(round_seconds / warm_step_seconds(fn)))
             for c, fn in runners.items()}
    rates = {c: [] for c in runners}
    for _ in range(rounds):
        for c, fn in runners.items():
            start = time.perf_counter()
            for _ in range(steps[c]):
                fn()
            wait_for_device("tpu" if c.startswith("tpu") else "cpu")
            rates[c].append(steps[c] / (time.perf_counter() - start))
    med = {c: statistics.median(r) for c, r in rates.items()}
    diffs = check_agreement(workload, values)
    return {"steps_per_second": med, "all_steps_per_second": rates, "warmup_seconds": warm,
            "steps_per_round": steps,
            "first_values": values, "max_difference_vs_eager_cpu_during_warmup": diffs}


# Every contender must compute the same values as PyTorch CPU eager over the warm-up steps
# (relative, as reduction orders differ): a faster wrong step is not a result.
_AGREEMENT_RTOL = 1e-4


def check_agreement(workload, values):
    ref = values.get("eager_cpu")
    if ref is None:
        return {}
    diffs = {c: max(abs(a - b) for a, b in zip(v, ref)) for c, v in values.items()}
    scale = max(abs(r) for r in ref) or 1.0
    wrong = {c: d for c, d in diffs.items() if d > _AGREEMENT_RTOL * scale}
    if wrong:
        raise SystemExit(f"{workload}: contenders disagree with PyTorch CPU eager beyond rtol "
                         f"{_AGREEMENT_RTOL}: {wrong} (values {values})")
    return diffs


def round_ratio(rates, a, b):
    """Median over rounds of a's rate / b's rate in the same round (host speed drifts between rounds)."""
    return statistics.median(x / y for x, y in zip(rates[a], rates[b]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=0.5,
                        help="each contender runs about this long per round (at least --steps steps)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch.set_num_threads for the CPU contenders (pinned; default: all cores)")
    parser.add_argument("--workloads", nargs="*",
                        default=["llama_train_small", "llama_train", "mingpt_train", "resnet18_infer"])
    parser.add_argument("--contenders", nargs="*", default=CONTENDERS, choices=CONTENDERS)
    parser.add_argument("--no-write", action="store_true",
                        help="print only (a run of some contenders or workloads must not replace the recorded results)")
    args = parser.parse_args()
    torch._dynamo.config.cache_size_limit = 64
    # PyTorch's CPU kernels use every core by default; pinned, so a contender's speed does not
    # collapse when another thread (our launcher, XLA's pool) competes for the 2 cores.
    torch.set_num_threads(args.threads)
    if "jax_jit_plugin" in args.contenders:
        try:  # before any contender starts JAX's backends (it reads its plugins then)
            _jax_plugin_device()
        except ImportError as e:
            print(f"jax_jit_plugin skipped ({e})")
    names = {"tpu_compile": "compile", "tpu_single_trace": "single trace", "inductor_cpu": "inductor",
             "eager_cpu": "eager cpu", "jax_jit": "jax", "jax_jit_plugin": "jax on the plugin"}
    data, table = {}, [["workload"] + args.contenders + [f"{names[a]} / {names[b]}" for a, b in RATIOS]]
    for w in args.workloads:
        r = measure(w, args.contenders, args.steps, args.rounds, args.warmup, args.round_seconds)
        data[w] = r
        med, rates = r["steps_per_second"], r["all_steps_per_second"]
        row = [w] + [f"{med[c]:.1f}/s (warm-up {r['warmup_seconds'][c]:.1f} s)" if c in med else "-"
                     for c in args.contenders]
        r["ratios"] = {}
        for ours, ref in RATIOS:
            if ours in rates and ref in rates:
                r["ratios"][f"{ours}/{ref}"] = round_ratio(rates, ours, ref)
                row.append(f"{r['ratios'][f'{ours}/{ref}']:.2f}x")
            else:
                row.append("-")
        table.append(row)
        print(row, flush=True)
    if args.no_write:
        return
    write("compile_step", 'torch.compile(backend="tpu") vs eager, Inductor, Strict, Fused and JAX', data, table, [
        f"Steps per second (median of {args.rounds} rounds; each contender runs at least {args.steps} "
        f"steps and about {args.round_seconds} s per round; higher is better). Warm-up = the first "
        f"{args.warmup} calls, compilation included. Ratios are (e) tpu_compile and (g) tpu_single_trace "
        "over the others, the median of per-round ratios (contenders alternate within each round). "
        f"torch.set_num_threads({args.threads}) for the CPU contenders. Every contender's warm-up "
        f"losses equal PyTorch CPU eager's within rtol {_AGREEMENT_RTOL} (checked; the run fails otherwise).",
        "Targets: (e) >= 1.0x Inductor and >= 2x eager CPU on the training steps; (e) within 1.1x of JAX; "
        "(g) >= 1.0x JAX and faster than Inductor. jax_jit_plugin: the JAX step on the PJRT plugin tpu runs on "
        "(the same XLA build as ours; jax_jit runs on jaxlib's own), not a target.",
    ])


if __name__ == "__main__":
    main()
