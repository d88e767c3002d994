"""One contender of benchmarks/peers.py, in its own interpreter, driven over stdin/stdout.

    <env>/bin/python benchmarks/peers/worker.py CONTENDER WORKLOAD.pt --threads T --warmup W

It sets up its framework, builds the workload, warms up (compiles) and answers one JSON line:
{"ready": ...}. Then, per request line from the driver:
  {"cmd": "dispatch", "iters": N} -> {"seconds": s}          N adds, then all of them finished
  {"cmd": "step", "steps": S}     -> {"seconds": s, "losses": [...]}
  {"cmd": "quit"}
--math-attention makes attention take PyTorch's math decomposition (sdpa_kernel(MATH)).
Frameworks print to stdout (some from C++), so the protocol uses a private copy of the original
stdout and fd 1 is pointed at stderr.
"""

import argparse
import json
import os
import sys
import time
import traceback

proto = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contenders  # noqa: E402  (imports no framework)


def answer(obj):
    proto.write(json.dumps(obj) + "\n")


def error_text():
    text = traceback.format_exc().strip()
    return text.splitlines()[-1][:400] + "\n" + text[-3000:]


def prepare(args):
    """Returns (ready message, add loop or None, finish, step or None)."""
    setup = contenders.setup(args.contender)
    import torch

    import workload

    torch.set_num_threads(args.threads)
    if setup.sdpa_math or args.math_attention:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        global _math_attention  # kept alive: collecting the context would leave it
        _math_attention = sdpa_kernel([SDPBackend.MATH])
        _math_attention.__enter__()  # for the whole process
    ready = {"torch": torch.__version__, "versions": setup.versions, "device": setup.device,
             "threads": torch.get_num_threads()}
    loop = step = None
    try:
        loop, check = workload.make_add(setup.device, setup.compile_fn)
        check()
        start = time.perf_counter()
        loop(args.dispatch_warmup, setup.finish)
        ready["dispatch_warmup_seconds"] = time.perf_counter() - start
    except Exception:
        loop, ready["dispatch_error"] = None, error_text()
    try:
        step = workload.make_step(args.workload, setup.device, setup.compile_fn, setup.capturable,
                                  setup.after_step)
        start = time.perf_counter()
        ready["warmup_losses"] = [step() for _ in range(args.warmup)]
        ready["step_warmup_seconds"] = time.perf_counter() - start
    except Exception:
        step, ready["step_error"] = None, error_text()
    if args.contender.startswith("ours_"):
        import torch_tpu

        ready["cpu_fallbacks"] = torch_tpu.fallback_counts()  # ops that left the device
    return ready, loop, setup.finish, step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("contender", choices=list(contenders.CONTENDERS))
    parser.add_argument("workload")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--dispatch-warmup", type=int, default=1000)
    parser.add_argument("--math-attention", action="store_true",
                        help="scaled_dot_product_attention through PyTorch's math decomposition")
    args = parser.parse_args()
    try:
        ready, loop, finish, step = prepare(args)
    except Exception:
        answer({"setup_error": error_text()})
        return
    answer({"ready": ready})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["cmd"] == "quit":
                break
            start = time.perf_counter()
            if request["cmd"] == "dispatch":
                loop(request["iters"], finish)
                answer({"seconds": time.perf_counter() - start})
            elif request["cmd"] == "step":
                losses = [step() for _ in range(request["steps"])]
                answer({"seconds": time.perf_counter() - start, "losses": losses})
            else:
                answer({"error": f"unknown request {request!r}"})
        except Exception:
            answer({"error": error_text()})


if __name__ == "__main__":
    main()
