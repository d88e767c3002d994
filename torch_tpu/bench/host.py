"""``python -m torch_tpu.bench host``: the host time of one step, per layer of our stack, beside
the device time (docs/performance.md says how to read it).

    python -m torch_tpu.bench host --model mlp --mode fused
    python -m torch_tpu.bench host --step my_module:make_step --mode strict --trace step.json

``--step module:function`` names a function that builds a model on ``tpu`` and returns a callable
running one step (it is called after the eager mode is set). From Python:
``torch_tpu.bench.host_breakdown(step)``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import threading
import time

import torch

from . import breakdown as _breakdown
from . import threads as _threads
from .models import BUILTIN_MODELS, builtin_step

MODES = ("strict", "fused", "debug", "compile")


def host_breakdown(step, *, steps: int = 5, warmup: int = 3, trace: str | None = None) -> _breakdown.Breakdown:
    """Warms the loop up (``warm_up(step, warmup)``), then profiles ``steps`` calls back to back,
    as a training loop runs them (the last one waits for the device, so the steps' wall time
    includes all their device work), and returns the per-step averages of each layer's host time.
    Where Linux reports per-thread scheduler times, the same number of steps runs once more after,
    unprofiled, for the CPU time and run-queue wait of each thread group (``Breakdown.threads``)."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"host_breakdown needs steps >= 1 and warmup >= 0 (got steps={steps}, warmup={warmup})")
    from torch.profiler import ProfilerActivity, profile, record_function

    warmup_steps, warmup_note = warm_up(step, warmup)
    torch.tpu.synchronize()
    config = torch.tpu.profiler.TpuProfilerConfig(host_tracer_level=3)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=config) as prof:
        for i in range(steps):
            with record_function(_breakdown.STEP_LABEL):
                step()
                if i == steps - 1:
                    torch.tpu.synchronize()
    if trace:
        prof.export_chrome_trace(trace)
    result = _breakdown.analyse(prof.profiler.kineto_results.events(), steps)
    result.warmup_steps, result.warmup_note = warmup_steps, warmup_note
    # After the profiled steps, so that those run where a loop without this tool would run them.
    result.threads = _unprofiled_threads(step, steps) if _threads.available() else None
    return result


def warm_up(step, warmup: int, *, settle: int = 3, max_more_s: float = 30.0, max_more_steps: int = 2000):
    """Runs ``step()`` ``warmup`` times and then, unless ``warmup`` is 0, on until the loop is
    steady: ``settle`` steps in a row compiled nothing, and Fused Eager's fuse advisor has no
    pattern on its way to a verdict (``fused_patterns_pending``) - its trials run some iterations
    op by op, which a profile of the loop should not catch. The steps it checks are run as a timed
    loop runs them: starting with the device idle and ending with a wait for it, since both cut
    Fused Eager's pending graph where the loop alone does not, so the graphs of those cuts are
    compiled here too. At most ``max_more_s`` seconds or ``max_more_steps`` steps more. Returns
    (steps run, "" or why the loop was not steady yet)."""
    for _ in range(warmup):
        step()
    if warmup == 0:
        return 0, ""

    def state():  # (programs compiled or loaded so far, loop patterns waiting for a verdict)
        s = torch.tpu.compilation_cache_stats()
        return s["compiles"] + s["disk_loads"], s["fused_patterns_pending"]

    quiet, more = 0, 0
    start = time.perf_counter()
    torch.tpu.synchronize()
    programs, pending = state()
    while True:
        if quiet >= settle and not pending:
            torch.tpu.synchronize()
            before = programs
            programs, pending = state()
            if programs == before and not pending:
                return warmup + more, ""
            quiet = 0  # the wait's cut compiled a graph: the steps after it start afresh too
        if more >= max_more_steps or time.perf_counter() - start > max_more_s:
            why = (f"the fuse advisor still had {pending} loop pattern(s) without a verdict (being timed, "
                   f"or left by an earlier loop)" if quiet >= settle else
                   "the loop still compiled programs in its last steps")
            return warmup + more, f"not steady after {warmup + more} warm-up steps: {why}"
        step()
        more += 1
        before = programs
        programs, pending = state()
        quiet = quiet + 1 if programs == before else 0


def _unprofiled_threads(step, steps: int):
    before = _threads.snapshot()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.tpu.synchronize()
    wall = time.perf_counter() - start
    return _threads.cpu_use(before, _threads.snapshot(), steps=steps, wall_s=wall,
                            step_thread=threading.get_native_id())


def _user_step(spec: str):
    module_name, sep, function = spec.partition(":")
    if not sep or not module_name or not function:
        raise SystemExit(f"--step takes module:function (for example my_model:make_step), got {spec!r}")
    sys.path.insert(0, ".")
    try:
        make = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as e:
        raise SystemExit(f"--step {spec}: cannot load it ({e})") from None
    step = make()
    if not callable(step):
        raise SystemExit(f"--step {spec}: {function}() must return a callable that runs one step, got {type(step).__name__}")
    return step


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_tpu.bench host", description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--model", choices=sorted(BUILTIN_MODELS), default="mlp",
                       help="a built-in training step (default: mlp)")
    which.add_argument("--step", metavar="MODULE:FUNCTION",
                       help="a function that returns a callable running one step of your model on tpu")
    parser.add_argument("--mode", choices=MODES, default="strict",
                        help="eager mode (compile: the built-in model under torch.compile(backend='tpu'))")
    parser.add_argument("--read-every", type=int, default=1,
                        help="built-in models: read the loss on the host every N steps (default 1)")
    parser.add_argument("--steps", type=int, default=5, help="profiled steps (default 5)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="steps run before profiling, and more until the loop is steady: nothing compiled "
                             "for 3 steps and the fuse advisor's timing done (default 3; 0: profile the first steps)")
    parser.add_argument("--json", metavar="PATH", help="also write the breakdown as JSON")
    parser.add_argument("--trace", metavar="PATH", help="also write the profiled steps as a Chrome trace")
    args = parser.parse_args(argv)
    if args.read_every < 1:
        parser.error("--read-every must be >= 1")

    import torch_tpu  # noqa: F401  (the device; also when autoloading is off)

    eager = "strict" if args.mode == "compile" else args.mode
    torch_tpu.execution_mode.set_mode(eager)
    if args.step:
        step = _user_step(args.step)
        what = args.step
    else:
        step = builtin_step(args.model, compiled=args.mode == "compile", read_every=args.read_every)
        what = f"built-in {args.model}"
    result = host_breakdown(step, steps=args.steps, warmup=args.warmup, trace=args.trace)
    print(f"{what}, mode {args.mode}, after {result.warmup_steps} warm-up steps")
    if result.warmup_note:
        print(f"note: {result.warmup_note}")
    print(result.table())
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"what": what, "mode": args.mode, **result.as_dict()}, f, indent=2)
    return 0
