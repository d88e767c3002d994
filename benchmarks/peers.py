"""torch_tpu against its peers, side by side in one run: Google's TorchTPU 0.2.0, PyTorch/XLA 2.9
and PyTorch's own CPU eager and Inductor, on the same workloads.

    .venv/bin/python benchmarks/peers.py [--rounds R] [--iters N] [--steps S] [--threads T]

(a) dispatch: N cached adds of two 8-element float32 tensors (benchmarks/dispatch.py's op), all
finished at the end; (b) the Llama-style training step of benchmarks/llama_step.py (models/llama.py,
AdamW, the loss read every step), S steps. Each contender runs in its own interpreter (its own
virtual environment: benchmarks/peers/setup_envs.sh builds the peers'), as one long-lived worker
process; the driver asks each in turn to run one round, so the rounds of all contenders
interleave in time and per-round ratios compare moments seconds apart. Every contender starts
from the same weights and batch (saved once by the driver); their losses must agree with PyTorch
CPU eager's within --tolerance or the run fails. A peer that is not installed or cannot run a
workload here is reported with its error; ours and the CPU contenders must run.

Every worker calls torch.set_num_threads(T) (default 1): unpinned, PyTorch CPU eager collapses
when other threads compete for this machine's 2 cores.
"""

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
PEERS = os.path.join(BENCH, "peers")
sys.path.insert(0, BENCH)
sys.path.insert(0, PEERS)

from contenders import CONTENDERS, ENVIRONMENTS  # noqa: E402

BASELINE = "ours_strict"
REFERENCE = "cpu_eager"  # the losses every contender must reproduce


class Worker:
    """One contender's worker process and the lines it answers."""

    def __init__(self, name, python, workload, args, logdir):
        self.name, self.timeout = name, args.request_timeout
        self.log_path = os.path.join(logdir, name + ".log")
        env = dict(os.environ, PYTHONWARNINGS="ignore:<TorchTpu/Performance/TcMalloc/",
                   TF_CPP_MIN_LOG_LEVEL="2")
        self.proc = subprocess.Popen(
            [python, os.path.join(PEERS, "worker.py"), name, workload, "--threads", str(args.threads),
             "--warmup", str(args.warmup)] + (["--math-attention"] if args.math_attention else []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log_path, "w"),
            cwd=logdir, env=env, text=True)  # cwd: no repository checkout on the peers' path
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def receive(self, timeout=None):
        try:
            line = self.lines.get(timeout=timeout or self.timeout)
        except queue.Empty:
            self.close()
            raise RuntimeError(f"{self.name}: no answer within {timeout or self.timeout} s{self.log_tail()}")
        if line is None:
            raise RuntimeError(f"{self.name}: worker exited (code {self.proc.wait()}){self.log_tail()}")
        return json.loads(line)

    def ask(self, **request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self.receive()
        if "error" in reply:
            raise RuntimeError(f"{self.name}: {reply['error']}")
        return reply

    def log_tail(self, lines=15):
        with open(self.log_path) as f:
            tail = [line.rstrip() for line in f.readlines()[-lines:]]
        return "\n  log: " + "\n  log: ".join(tail) if tail else ""

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def first_line(text):
    return text.strip().splitlines()[0] if text else ""


def start(names, workload, args, logdir):
    """Starts the workers one after another (warm-up times are not shared with other contenders).
    Returns {name: Worker}, {name: ready message}, {name: why it cannot run}."""
    workers, ready, missing = {}, {}, {}
    for name in names:
        env = ENVIRONMENTS[CONTENDERS[name][0]]
        python = os.path.join(env, "bin", "python")
        if not os.path.exists(python):
            missing[name] = f"environment {os.path.relpath(env, os.path.dirname(BENCH))} missing: run benchmarks/peers/setup_envs.sh"
            continue
        print(f"starting {name} ...", file=sys.stderr, flush=True)
        worker = Worker(name, python, workload, args, logdir)
        try:
            reply = worker.receive(timeout=args.start_timeout)
        except RuntimeError as e:
            missing[name] = str(e)
            continue
        if "setup_error" in reply:
            missing[name] = reply["setup_error"]
            worker.close()
            continue
        workers[name], ready[name] = worker, reply["ready"]
        r = reply["ready"]
        print(f"  {name}: torch {r['torch']} {r['versions']}; dispatch "
              f"{'ok' if 'dispatch_error' not in r else first_line(r['dispatch_error'])}; step "
              f"{'ok' if 'step_error' not in r else first_line(r['step_error'])}", file=sys.stderr, flush=True)
    return workers, ready, missing


def run_rounds(workers, ready, args, failed):
    """Each round asks every worker in turn (starting one further each round) for one dispatch
    loop and one set of steps. Returns per-contender lists of seconds and the losses; an optional
    contender that fails is moved to `failed` {name: error}."""
    dispatch = {n: [] for n in workers if "dispatch_error" not in ready[n]}
    steps = {n: [] for n in workers if "step_error" not in ready[n]}
    losses = {n: list(ready[n]["warmup_losses"]) for n in steps}
    order = list(workers)
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        for name in order[r % len(order):] + order[:r % len(order)]:
            if name in failed:
                continue
            try:
                if name in dispatch:
                    dispatch[name].append(workers[name].ask(cmd="dispatch", iters=args.iters)["seconds"])
                if name in steps:
                    reply = workers[name].ask(cmd="step", steps=args.steps)
                    steps[name].append(reply["seconds"])
                    losses[name] += reply["losses"]
            except RuntimeError as e:
                if not CONTENDERS[name][2]:
                    raise
                # An optional peer that breaks mid-run leaves the table with its error.
                failed[name] = f"failed in round {r + 1}: {e}"
                workers[name].close()
                for table in (dispatch, steps, losses):
                    table.pop(name, None)
    return dispatch, steps, losses


def loss_disagreements(losses, tolerance):
    """{name: largest |loss - reference loss|} and the names beyond tolerance (relative to the
    loss, at least 1)."""
    ref_name = REFERENCE if REFERENCE in losses else next(iter(losses))
    ref = losses[ref_name]
    diffs, bad = {}, []
    for name, values in losses.items():
        if len(values) != len(ref):
            bad.append(name)
            diffs[name] = float("inf")
            continue
        diffs[name] = max(abs(a - b) for a, b in zip(values, ref))
        if any(abs(a - b) > tolerance * max(1.0, abs(b)) for a, b in zip(values, ref)):
            bad.append(name)
    return ref_name, diffs, bad


def per_round_ratio(seconds, name):
    base = seconds.get(BASELINE)
    if not base or name not in seconds:
        return None
    return statistics.median(t / b for t, b in zip(seconds[name], base))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=5000, help="adds per dispatch round")
    parser.add_argument("--steps", type=int, default=10, help="training steps per round")
    parser.add_argument("--warmup", type=int, default=3,
                        help="training steps before timing (Fused modes and lazy tensors compile "
                             "new graphs in the first two)")
    parser.add_argument("--size", default="reference", help="llama_step size")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in every worker")
    parser.add_argument("--tolerance", type=float, default=1e-3, help="relative loss agreement")
    parser.add_argument("--contenders", nargs="*", default=list(CONTENDERS), choices=list(CONTENDERS))
    parser.add_argument("--start-timeout", type=float, default=900, help="seconds for set-up and warm-up")
    parser.add_argument("--request-timeout", type=float, default=600, help="seconds for one round")
    parser.add_argument("--keep-logs", action="store_true", help="keep the workers' logs")
    parser.add_argument("--math-attention", action="store_true",
                        help="every contender computes attention with PyTorch's math decomposition "
                             "(TorchTPU always does here), so all run the same op sequence")
    parser.add_argument("--no-save", action="store_true", help="print the table, leave results/ alone")
    args = parser.parse_args()
    if args.rounds < 1 or args.iters < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 1:
        parser.error("--rounds, --iters, --steps and --threads must be positive, --warmup >= 0")

    import workload  # torch of this interpreter (the project's .venv)

    if args.size not in workload.SIZES:
        parser.error(f"--size must be one of {sorted(workload.SIZES)}")
    logdir = tempfile.mkdtemp(prefix="peers-")
    workers = {}
    try:
        path = os.path.join(logdir, "workload.pt")
        workload.save(path, args.size)
        workers, ready, missing = start(args.contenders, path, args, logdir)
        required = [n for n in args.contenders if not CONTENDERS[n][2]]
        broken = [n for n in required if n in missing or n not in workers
                  or "dispatch_error" in ready[n] or "step_error" in ready[n]]
        if broken:
            for n in broken:
                r = ready.get(n, {})
                print(f"{n}: {missing.get(n) or r.get('dispatch_error') or r.get('step_error')}", file=sys.stderr)
            raise SystemExit(f"required contenders failed: {', '.join(broken)}")
        start_time = time.time()
        dispatch, steps, losses = run_rounds(workers, ready, args, missing)
        elapsed = time.time() - start_time
    finally:
        for w in workers.values():
            w.close()
        if args.keep_logs:
            print(f"worker logs kept in {logdir}", file=sys.stderr)
        else:
            shutil.rmtree(logdir, ignore_errors=True)

    ref_name, diffs, bad = loss_disagreements(losses, args.tolerance)
    report(args, ready, missing, dispatch, steps, losses, ref_name, diffs, bad, elapsed)
    if bad:
        raise SystemExit(f"LOSSES DISAGREE with {ref_name} beyond a relative {args.tolerance}: "
                         + ", ".join(f"{n} (largest difference {diffs[n]:.3g})" for n in bad))


def print_only(name, title, data, table, notes):
    print(f"# {title}")
    for row in table:
        print("| " + " | ".join(str(c) for c in row) + " |")
    print("\n".join(notes))


def report(args, ready, missing, dispatch, steps, losses, ref_name, diffs, bad, elapsed):
    from _results import write

    us = {n: statistics.median(v) / args.iters * 1e6 for n, v in dispatch.items()}
    sps = {n: args.steps / statistics.median(v) for n, v in steps.items()}
    table = [["contender", "µs per add (median)", "add time / ours Strict (median of rounds)",
              "steps/s (median)", "step time / ours Strict (median of rounds)",
              f"largest loss difference vs {ref_name}", "warm-up s (add, steps)", "notes"]]
    results = {}
    for name in args.contenders:
        label = CONTENDERS[name][1]
        if name in missing:
            table.append([label, "-", "-", "-", "-", "-", "-", "not run: " + first_line(missing[name])])
            results[name] = {"label": label, "not_run": missing[name]}
            continue
        r = ready[name]
        notes = []
        for key in ("dispatch_error", "step_error"):
            if key in r:
                notes.append(f"{key.split('_')[0]} failed: {first_line(r[key])}")
        if r.get("cpu_fallbacks"):
            notes.append(f"CPU fallbacks: {r['cpu_fallbacks']}")
        if name in bad:
            notes.append("LOSSES DISAGREE")
        add_ratio, step_ratio = per_round_ratio(dispatch, name), per_round_ratio(steps, name)
        table.append([
            label,
            f"{us[name]:.1f}" if name in us else "-",
            f"{add_ratio:.2f}" if add_ratio is not None else "-",
            f"{sps[name]:.2f}" if name in sps else "-",
            f"{step_ratio:.2f}" if step_ratio is not None else "-",
            f"{diffs[name]:.1e}" if name in diffs else "-",
            f"{r.get('dispatch_warmup_seconds', float('nan')):.1f}, {r.get('step_warmup_seconds', float('nan')):.1f}",
            "; ".join(notes)])
        results[name] = {"label": label, "torch": r["torch"], "versions": r["versions"],
                         "threads": r["threads"],
                         # Errors keep their message; the traceback is in the worker's log.
                         "ready": {k: first_line(v) if k.endswith("_error") else v for k, v in r.items()},
                         "dispatch_seconds_per_round": dispatch.get(name),
                         "step_seconds_per_round": steps.get(name), "losses": losses.get(name),
                         "us_per_add_median": us.get(name), "steps_per_second_median": sps.get(name),
                         "add_time_over_ours_strict": add_ratio, "step_time_over_ours_strict": step_ratio,
                         "largest_loss_difference": diffs.get(name)}
    size = args.size
    notes = [
        f"{args.rounds} rounds, run {time.strftime('%Y-%m-%d')}; each round: {args.iters} adds then "
        f"{args.steps} training steps per contender, contenders in turn (a different one first each "
        f"round), each in its own long-lived interpreter. Ratios: median over rounds of the ratio "
        f"within a round (> 1: slower than ours Strict).",
        f"Training step: llama_step's \"{size}\" size, {args.warmup} warm-up steps, same weights and "
        f"batch for everyone; every contender's losses (warm-up included) agree with {ref_name}'s "
        f"within a relative {args.tolerance} ({'all agree' if not bad else 'NOT: ' + ', '.join(bad)}).",
        f"Every worker runs torch.set_num_threads({args.threads}): PyTorch CPU eager is pinned "
        "(unpinned, it collapses when other threads compete for the 2 cores); the XLA-based "
        "contenders' own thread pools are not affected.",
        "TorchTPU 0.2.0 runs on the same XLA CPU plugin build as ours (fastatomstruct-xla-cpu, "
        "through TPU_LIBRARY_PATH, TPU_SKIP_MDS_QUERY=1, no libtpu). Its scaled_dot_product_attention "
        "is a Pallas TPU kernel the CPU plugin cannot compile, so it runs attention through "
        "PyTorch's math decomposition (sdpa_kernel(MATH)); ours uses its own SDPA lowering. Its "
        "torch.compile needs the plugin's GetOutputMemoryKinds, which the CPU plugin lacks. No "
        "tcmalloc is preloaded for it (it warns that host work may be slower).",
        ("All contenders ran attention through the math decomposition (--math-attention)."
         if args.math_attention else "Ours, PyTorch/XLA and the CPU contenders ran their own "
         "scaled_dot_product_attention (--math-attention makes everyone use the math decomposition)."),
        "PyTorch/XLA 2.9 (PJRT_DEVICE=CPU) uses its own built-in XLA CPU client. In lazy mode the "
        "adds whose results are dropped are only traced (sync executes nothing), so its add time "
        "is tracing cost; its step is traced, cut with torch_xla.sync() and replayed from its cache.",
        "The compiled contenders' add is a call of a compiled `a + b` function (guards, wrappers "
        "and one program).",
        "", "Run: `benchmarks/peers/setup_envs.sh` once, then `.venv/bin/python benchmarks/peers.py "
        "[--rounds R --iters N --steps S --threads T]`."]
    if args.no_save:
        write = print_only
    write("peers", "torch_tpu against its peers: dispatch and the Llama-style training step",
          {"rounds": args.rounds, "iters": args.iters, "steps_per_round": args.steps,
           "warmup_steps": args.warmup, "size": size, "threads": args.threads,
           "math_attention": args.math_attention,
           "tolerance": args.tolerance, "loss_reference": ref_name, "losses_agree": not bad,
           "disagreeing": bad, "rounds_seconds": elapsed, "contenders": results},
          table, notes)


if __name__ == "__main__":
    main()
