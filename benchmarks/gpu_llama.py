"""Llama-style training step on one GPU: torch_tpu (the `tpu` device on the XLA CUDA plugin)
against PyTorch on the same GPU, side by side in one process.

    TORCH_TPU_PLATFORM=cuda python benchmarks/gpu_llama.py [--config full] [--out DIR]
    python benchmarks/gpu_llama.py --config tiny          # CPU dry run: tpu (CPU plugin) vs CPU

Contenders, each training its own copy of the same bf16 model from the same weights on the same
batch (forward + backward + AdamW, the loss read back every step), in this order:
  ref_eager      PyTorch eager on the reference device (cuda; cpu when there is no GPU)
  ref_inductor   torch.compile (Inductor) on the reference device (cuda only by default)
  tpu_compile    torch.compile(step, backend="tpu") - forward, backward and AdamW as one program
  tpu_fused      Fused eager (ops recorded, run as one cached graph per step)
The reference contenders on cuda run in a child process that never loads torch_tpu: PyTorch takes a
registered PrivateUse1 backend as the process's one accelerator, and CUDA autograd then fails in
that process (an internal assert in the autograd engine; pytorch/pytorch#161129).
Reported: step time, tokens/s, MFU (model FLOPs per step / step time / --peak-flops) and the
per-op dispatch cost of Strict mode against eager on the reference device (`a + b`, 8 elements).
The contenders' losses must agree (bf16 tolerance); otherwise the run fails (exit 2) after
writing its results. Results: OUTDIR/gpu_llama.json (default benchmarks/results/).
"""

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, ".."))

from models.llama import Llama, LlamaConfig  # noqa: E402

# ~1B parameters: 16 layers of dim 2048 (SwiGLU hidden 5632), 32k vocabulary, 2048 tokens.
CONFIGS = {
    "full": dict(vocab=32000, dim=2048, layers=16, heads=16, kv_heads=16, hidden=5632, seq=2048, batch=4),
    # The CPU dry run: same layers, a few elements each.
    "tiny": dict(vocab=256, dim=64, layers=2, heads=4, kv_heads=2, hidden=128, seq=32, batch=2),
}
# H200 dense bf16 peak the MFU is quoted against (override with --peak-flops).
DEFAULT_PEAK_FLOPS = 790e12
# The reference first: its losses are the ones the others are checked against, and PyTorch's
# caching allocator hands its memory back (empty_cache) before XLA's pool grows.
ALL_CONTENDERS = ("ref_eager", "ref_inductor", "tpu_compile", "tpu_fused")


def model_config(c):
    return LlamaConfig(vocab_size=c["vocab"], dim=c["dim"], n_layers=c["layers"], n_heads=c["heads"],
                       n_kv_heads=c["kv_heads"], hidden_dim=c["hidden"], max_seq_len=c["seq"])


def flops_per_step(c, n_params, n_embedding):
    """Model FLOPs of one training step: 6 per non-embedding parameter per token (forward +
    backward matmuls) plus causal-free attention scores, 12 * layers * dim * seq per token
    (the PaLM appendix B count)."""
    tokens = c["batch"] * c["seq"]
    per_token = 6 * (n_params - n_embedding) + 12 * c["layers"] * c["dim"] * c["seq"]
    return per_token * tokens


def initial_state(c, seed):
    """The weights every contender starts from (built once on the CPU, in bf16) and the batch."""
    torch.manual_seed(seed)
    model = Llama(model_config(c)).to(torch.bfloat16)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, c["vocab"], (c["batch"], c["seq"] + 1), generator=g)
    n_params = sum(p.numel() for p in model.parameters())
    n_embedding = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
    return model.state_dict(), tokens, n_params, n_embedding


def make_step(name, c, state, tokens, device):
    """A function running one training step of contender `name`, returning the loss (float)."""
    model = Llama(model_config(c)).to(torch.bfloat16)
    model.load_state_dict(state)
    model = model.to(device)
    compiled = name in ("tpu_compile", "ref_inductor")
    # foreach everywhere (the same optimizer code); capturable keeps the step count on the device
    # so a compiled optimizer step has no host scalar in it.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True,
                            capturable=compiled)
    x, y = tokens[:, :-1].to(device), tokens[:, 1:].to(device)

    def body():
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss.detach()

    if name == "tpu_compile":
        body = torch.compile(body, backend="tpu")
    elif name == "ref_inductor":
        body = torch.compile(body)

    def step():
        opt.zero_grad(set_to_none=True)
        return body().float().item()  # the host reads the loss, as a training loop logs it

    return step


def synchronize(device):
    if device == "tpu":
        torch.tpu.synchronize()
    elif device == "cuda":
        torch.cuda.synchronize()


def _tpu_mode(name):
    """Strict, Fused or Debug for the tpu contenders (torch_tpu imported only where it runs)."""
    from torch_tpu.execution_mode import mode

    return mode(name)


def run_contender(name, c, state, tokens, ref_device, steps, warmup):
    device = "tpu" if name.startswith("tpu") else ref_device
    eager_mode = "fused" if name == "tpu_fused" else "strict"
    with _tpu_mode(eager_mode) if device == "tpu" else contextlib.nullcontext():
        step = make_step(name, c, state, tokens, device)
        losses, times = [], []
        t0 = time.perf_counter()
        for _ in range(warmup):
            losses.append(step())
        warmup_s = time.perf_counter() - t0
        before = _cache_counts() if device == "tpu" else None
        for _ in range(steps):
            synchronize(device)
            t = time.perf_counter()
            losses.append(step())
            times.append(time.perf_counter() - t)
        r = {"device": device, "mode": eager_mode if device == "tpu" else "eager",
             "losses": losses, "step_times_s": times, "warmup_s": warmup_s,
             "step_s": statistics.median(times)}
        if before is not None:  # what a timed step launched and compiled (explains a slow contender)
            after = _cache_counts()
            r["per_step"] = {k: (after[k] - before[k]) / steps for k in after}
            r["breakdown"] = _profiled_breakdown(step)  # two more steps: device vs host time
    return r


def _profiled_breakdown(step):
    """``torch_tpu.bench.host_breakdown`` of two steps (wall, device busy and programs per step,
    host time per layer of our stack), or the reason it could not be taken."""
    from torch_tpu.bench import host_breakdown

    try:
        b = host_breakdown(step, steps=2, warmup=0)
    except Exception as e:  # the profile is a diagnosis: its failure must not lose the timings
        return {"error": f"{type(e).__name__}: {e}"[:500]}
    return {**b.as_dict(), "verdict": b.verdict()}


def _cache_counts():
    """Programs executed and compiled so far, and input buffers donated to outputs."""
    stats = torch.tpu.compilation_cache_stats()
    return {k: stats[k] for k in ("executions", "compiles", "donated_buffers")}


def dispatch_per_op(ref_device, iters):
    """Seconds per `a + b` (8 elements, cached program): tpu Strict vs eager on `ref_device`."""
    out = {}
    for device in ("tpu", ref_device):
        with _tpu_mode("strict") if device == "tpu" else contextlib.nullcontext():
            a, b = torch.randn(8, device=device), torch.randn(8, device=device)
            for _ in range(100):
                a + b
            synchronize(device)
            best = math.inf
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(iters):
                    a + b
                synchronize(device)
                best = min(best, (time.perf_counter() - t) / iters)
        out[device] = best
    return out


def check_losses(results, rtol, atol):
    """Every contender's losses against the first one's; returns the list of disagreements."""
    names = list(results)
    base = results[names[0]]["losses"]
    problems = []
    for name in names[1:]:
        other = results[name]["losses"]
        for i, (a, b) in enumerate(zip(base, other)):
            if not (math.isfinite(a) and math.isfinite(b)) or abs(a - b) > atol + rtol * abs(a):
                problems.append(f"step {i}: {names[0]} loss {a:.5f} vs {name} loss {b:.5f}")
                break
    return problems


def default_ref_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default=None,
                   help="model size (default: full with a GPU reference device, else tiny)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 5 full, 3 tiny)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (compiles)")
    p.add_argument("--batch", type=int, default=None, help="override the config's batch")
    p.add_argument("--seq", type=int, default=None, help="override the config's sequence length")
    p.add_argument("--contenders", default=None,
                   help=f"comma list of {','.join(ALL_CONTENDERS)} (default: all; "
                        "no ref_inductor on a CPU reference)")
    p.add_argument("--ref-device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--peak-flops", type=float, default=DEFAULT_PEAK_FLOPS)
    p.add_argument("--dispatch-iters", type=int, default=2000)
    p.add_argument("--loss-rtol", type=float, default=3e-2, help="bf16 loss agreement, relative")
    p.add_argument("--loss-atol", type=float, default=3e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(_HERE, "results"), help="directory for gpu_llama.json")
    p.add_argument("--reference-in-child", action="store_true",
                   help="run the reference contenders in a child process without torch_tpu "
                        "(always so on cuda)")
    p.add_argument("--reference-only", action="store_true", help=argparse.SUPPRESS)  # the child
    return p.parse_args(argv)


def run_contenders(names, c, state, tokens, ref_device, steps, warmup, flops, peak_flops):
    """Runs `names` in this process, printing each; returns (results, errors)."""
    results, errors = {}, {}
    for name in names:
        try:
            r = run_contender(name, c, state, tokens, ref_device, steps, warmup)
        except Exception as e:  # one contender failing must not hide the others' numbers
            errors[name] = f"{type(e).__name__}: {e}"[:2000]
            print(f"  {name}: FAILED {errors[name][:300]}", flush=True)
            continue
        r["tokens_per_s"] = c["batch"] * c["seq"] / r["step_s"]
        r["mfu"] = flops / r["step_s"] / peak_flops
        results[name] = r
        print(f"  {name:13s} {r['step_s'] * 1e3:9.2f} ms/step  {r['tokens_per_s']:12.0f} tok/s  "
              f"MFU {r['mfu'] * 100:6.2f}%  loss {r['losses'][-1]:.4f}", flush=True)
        if ref_device == "cuda":
            torch.cuda.empty_cache()  # the next contender (maybe the XLA pool) gets the memory
    return results, errors


def run_reference_in_child(names, c, args, ref_device):
    """The reference contenders in a child process that does not load torch_tpu (see the
    module's docstring); returns (results, errors) as `run_contenders` does."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, os.path.abspath(__file__), "--reference-only", "--out", d,
               "--contenders", ",".join(names), "--ref-device", ref_device, "--batch", str(c["batch"]),
               "--seq", str(c["seq"]), "--warmup", str(args.warmup), "--seed", str(args.seed),
               "--peak-flops", str(args.peak_flops), "--config", args.config_name]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        proc = subprocess.run(cmd, env=env)  # its lines go to this process's output
        path = os.path.join(d, "reference.json")
        if not os.path.exists(path):
            return {}, {n: f"the reference process exited with {proc.returncode} before its results"
                        for n in names}
        with open(path) as f:
            data = json.load(f)
    for r in data["results"].values():
        r["process"] = "child"
    return data["results"], data["errors"]


def markdown(data) -> str:
    """The results as a table (gpu_llama.md beside gpu_llama.json)."""
    env, c = data["environment"], data["config"]
    ref = next(iter(data["contenders"].values()), None)
    lines = [
        "# Llama training step on one GPU: torch_tpu on the XLA CUDA plugin vs PyTorch on the same GPU",
        "",
        f"Measured {env['date']} on {env['reference_name']} ({env['tpu_device_kind']} through "
        f"{env['plugin']}, PJRT {env['pjrt_api']}), torch {env['torch']}, Python {env['python']}.",
        f"Model: {data['params'] / 1e6:.0f}M parameters (dim {c['dim']}, {c['layers']} layers, vocab "
        f"{c['vocab']}), bf16, batch {c['batch']} x {c['seq']} tokens, AdamW; {data['warmup']} warm-up "
        f"steps then the median of {data['steps']}; MFU against {data['peak_flops'] / 1e12:.0f} TFLOP/s.",
        "",
        "| contender | ms/step | tokens/s | MFU | vs the first | warm-up s | last loss | programs / step | compiles / step | device busy ms / step (profiled) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in data["contenders"].items():
        ratio = ref["step_s"] / r["step_s"] if ref else float("nan")
        per = r.get("per_step")
        counts = f"{per['executions']:.1f} | {per['compiles']:.1f}" if per else "- | -"
        prof = r.get("breakdown") or {}
        busy = f"{prof['device_busy_ms']:.1f} of {prof['wall_ms']:.1f}" if "wall_ms" in prof else "-"
        lines.append(f"| {name} | {r['step_s'] * 1e3:.1f} | {r['tokens_per_s']:.0f} | {r['mfu'] * 100:.1f}% | "
                     f"{ratio:.2f}x | {r['warmup_s']:.1f} | {r['losses'][-1]:.4f} | {counts} | {busy} |")
    for name, err in data["errors"].items():
        lines.append(f"| {name} | failed: {err[:120]} | | | | | | | | |")
    d = data["dispatch_per_op_s"]
    lines += [
        "",
        "vs the first: its step time over the contender's (above 1 the contender is faster). "
        "Device busy: the union of the device programs' run times over the wall time of two more "
        "steps under torch.profiler (`torch_tpu.bench.host_breakdown`; the JSON has the host layers). "
        f"Losses agree within rtol {data['loss_tolerance']['rtol']} (mismatches: "
        f"{len(data['loss_mismatches'])}).",
        f"Dispatch of one small op (`a + b`, 8 elements): tpu Strict {d['tpu'] * 1e6:.1f} us, "
        f"{env['reference_device']} eager {d[env['reference_device']] * 1e6:.1f} us.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    ref_device = args.ref_device or default_ref_device()
    if ref_device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_llama: --ref-device cuda but torch.cuda.is_available() is False")
    args.config_name = args.config or ("full" if ref_device == "cuda" else "tiny")
    c = dict(CONFIGS[args.config_name])
    if args.batch:
        c["batch"] = args.batch
    if args.seq:
        c["seq"] = args.seq
    steps = args.steps or (5 if c["dim"] >= 1024 else 3)
    if args.contenders:
        names = [n.strip() for n in args.contenders.split(",") if n.strip()]
        unknown = [n for n in names if n not in ALL_CONTENDERS]
        if unknown:
            raise SystemExit(f"gpu_llama: unknown contender(s) {unknown}; choose from {ALL_CONTENDERS}")
    else:
        names = [n for n in ALL_CONTENDERS if not (n == "ref_inductor" and ref_device == "cpu")]

    state, tokens, n_params, n_embedding = initial_state(c, args.seed)
    flops = flops_per_step(c, n_params, n_embedding)
    if args.reference_only:  # the child of run_reference_in_child: no torch_tpu here
        results, errors = run_contenders(names, c, state, tokens, ref_device, steps, args.warmup, flops,
                                         args.peak_flops)
        for r in results.values():
            r["torch_tpu_loaded"] = "torch_tpu" in sys.modules  # must stay False
        with open(os.path.join(args.out, "reference.json"), "w") as f:
            json.dump({"results": results, "errors": errors}, f)
        return 0

    import torch_tpu  # noqa: F401  (the tpu device)

    props = torch.tpu.get_device_properties(0)
    print(f"gpu_llama: {n_params / 1e6:.1f}M params, batch {c['batch']} x {c['seq']}, "
          f"tpu = {props.device_kind} ({props.platform}), reference = {ref_device}", flush=True)

    refs = [n for n in names if not n.startswith("tpu")]
    results, errors = {}, {}
    if refs and (ref_device == "cuda" or args.reference_in_child):
        results, errors = run_reference_in_child(refs, c, args, ref_device)
        names = [n for n in names if n.startswith("tpu")]
    more, more_errors = run_contenders(names, c, state, tokens, ref_device, steps, args.warmup, flops,
                                       args.peak_flops)
    results.update(more)
    errors.update(more_errors)

    dispatch = dispatch_per_op(ref_device, args.dispatch_iters)
    print(f"  dispatch per op: tpu Strict {dispatch['tpu'] * 1e6:.2f} us, {ref_device} eager "
          f"{dispatch[ref_device] * 1e6:.2f} us", flush=True)
    mismatches = check_losses(results, args.loss_rtol, args.loss_atol) if len(results) > 1 else []

    data = {
        "benchmark": "gpu_llama",
        "environment": {
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__,
            "python": platform.python_version(), "cpu_cores": os.cpu_count(),
            "tpu_device_kind": props.device_kind, "tpu_platform": props.platform,
            "plugin": os.path.basename(props.plugin), "pjrt_api": props.pjrt_api_version,
            "reference_device": ref_device,
            "reference_name": torch.cuda.get_device_name(0) if ref_device == "cuda" else platform.processor(),
        },
        "config": c, "params": n_params, "embedding_params": n_embedding,
        "flops_per_step": flops, "peak_flops": args.peak_flops, "steps": steps, "warmup": args.warmup,
        "contenders": results, "errors": errors,
        "dispatch_per_op_s": dispatch,
        "dispatch_ratio_tpu_over_ref": dispatch["tpu"] / dispatch[ref_device],
        "loss_mismatches": mismatches,
        "loss_tolerance": {"rtol": args.loss_rtol, "atol": args.loss_atol},
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gpu_llama.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
    with open(os.path.join(args.out, "gpu_llama.md"), "w") as f:
        f.write(markdown(data))
    print(f"gpu_llama: wrote {path} and gpu_llama.md", flush=True)
    if mismatches:
        print("gpu_llama: LOSSES DISAGREE between contenders:\n  " + "\n  ".join(mismatches), file=sys.stderr)
        return 2
    if errors:
        print(f"gpu_llama: contender(s) failed: {sorted(errors)}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
