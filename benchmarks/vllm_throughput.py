"""Offline vLLM throughput on ``tpu`` (torch_tpu's step runner) vs vLLM's own CPU engine.

Run with the serving environment:  .venv-serve/bin/python benchmarks/vllm_throughput.py
(options: --models tiny,100m --batches 1,8,32 --rounds 3 --prompt-len 32 --max-tokens 64
--legacy fused: also run vLLM's own runner on tpu in that TORCH_TPU_VLLM_MODE).

Each model (a tiny Llama and a ~100M-parameter Llama, random weights, saved locally) is loaded
once by each engine in its own worker process; the workers stay up and the driver interleaves
them: per round and batch size, each engine in turn generates for a new set of prompts (greedy,
prefix caching off), first with max_tokens=1 (prefill), then with max_tokens=T. Medians over the
rounds:
  prefill tokens/s = prompt tokens / time of generate(max_tokens=1)
  decode tokens/s  = (generated tokens - one per prompt) / (time of generate(max_tokens=T)
                     - prefill time)
and, on tpu, the device programs compiled during the measured rounds (0 = nothing compiled after
warm-up), the step programs the warm-up captured, and the host's own time per decode step (the
step's wall time minus the time the host waited for the device: vLLM's scheduler and output
processing, our request table, packing and dispatch) beside the CPU time the step loop's thread
used per step. Both engines must produce the same tokens.
Results: benchmarks/results/vllm_throughput.{json,md,svg}.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
RESULT = "@@result "

# head_dim 32 / 64: head sizes both vLLM's CPU attention and ours support.
MODELS = {
    "tiny": dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=False,
                 max_position_embeddings=512),
    "100m": dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                 num_attention_heads=12, num_key_value_heads=12, head_dim=64, tie_word_embeddings=True,
                 max_position_embeddings=1024),
}


def save_model(name, root):
    import torch
    import transformers

    path = root / name
    config = transformers.LlamaConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0, **MODELS[name])
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(path, safe_serialization=True)
    return path, sum(p.numel() for p in model.parameters()), config.vocab_size


def prompts_for(vocab, batch, length, round_):
    """`batch` prompts with lengths spread over [length/2, length], new tokens per round."""
    lengths = [max(2, length // 2 + (length // 2) * i // max(1, batch - 1)) for i in range(batch)]
    return [[(31 * i + 17 * j + 7919 * round_) % (vocab - 3) + 3 for j in range(n)] for i, n in enumerate(lengths)]


# ----------------------------------------------------------------------------- worker side
def worker(spec):
    os.environ.update(OFFLINE)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: its counters
    engine = spec["engine"]
    if engine == "cpu":
        os.environ["TORCH_TPU_VLLM"] = "0"
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    else:
        os.environ["TORCH_TPU_VLLM_MODE"] = spec["mode"]
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=spec["model"], skip_tokenizer_init=True, dtype="float32", max_model_len=spec["max_len"],
              max_num_seqs=max(spec["batches"]), seed=0, enable_prefix_caching=False, enforce_eager=True,
              kv_cache_memory_bytes=512 * 1024 * 1024)

    def counters():
        if engine != "tpu":
            return {}
        import torch

        out = {"compiles": int(torch.tpu.compilation_cache_stats()["compiles"])}
        if spec["mode"] == "program":
            from torch_tpu import _C
            from torch_tpu.vllm.model_runner import program_stats

            out.update(program_stats())
            # A replay waits while the previous step's launch is still queued for PJRT (on this
            # plugin, Execute of the previous step): waiting for the device, not host work.
            out["launch_wait_ns"] = _C._replay_host_stats()[2]
        return out

    def generate(prompts, n):
        params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, detokenize=False)
        start = time.perf_counter()
        out = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return time.perf_counter() - start, [list(o.outputs[0].token_ids) for o in out]

    warm = counters()
    for b in spec["batches"]:  # warm-up: the same loop on other prompts
        prompts = prompts_for(spec["vocab"], b, spec["prompt_len"], 1000)
        generate(prompts, 1)
        generate(prompts, spec["max_tokens"])
    after_warm = counters()
    print(RESULT + json.dumps({"ready": True, "warmup_programs": after_warm.get("captures", 0) - warm.get("captures", 0)}),
          flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("quit"):
            break
        prompts = prompts_for(spec["vocab"], cmd["batch"], spec["prompt_len"], cmd["round"])
        before = counters()
        t_prefill, _ = generate(prompts, 1)
        mid = counters()
        cpu0 = time.thread_time()
        t_full, tokens = generate(prompts, spec["max_tokens"])
        cpu_full = time.thread_time() - cpu0
        after = counters()
        res = {"prefill_s": t_prefill, "full_s": t_full, "tokens": tokens,
               "prompt_tokens": sum(len(p) for p in prompts)}
        if engine == "tpu":
            res["compiles"] = after["compiles"] - before["compiles"]
            if "steps" in after:
                steps = after["steps"] - mid["steps"]
                wait = (after["wait_ns"] - mid["wait_ns"] + after["launch_wait_ns"] - mid["launch_wait_ns"]) / 1e9
                res["host_ms_per_step"] = (t_full - wait) / max(steps, 1) * 1e3
                res["host_cpu_ms_per_step"] = cpu_full / max(steps, 1) * 1e3
                res["runner_host_ms_per_step"] = (after["host_ns"] - mid["host_ns"]) / 1e6 / max(steps, 1)
        print(RESULT + json.dumps(res), flush=True)


# ----------------------------------------------------------------------------- driver side
class Worker:
    def __init__(self, spec, tmp, timeout):
        self.spec = spec
        self.log = open(tmp / f"{spec['label']}.log", "w")
        env = dict(os.environ, **OFFLINE)
        env.pop("PYTHONPATH", None)
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)], env=env, cwd=tmp,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.timeout = timeout
        self.ready = self._read()

    def _read(self):
        deadline = time.monotonic() + self.timeout
        for line in self.proc.stdout:
            if line.startswith(RESULT):
                return json.loads(line[len(RESULT):])
            if time.monotonic() > deadline:
                break
        self.log.flush()
        tail = pathlib.Path(self.log.name).read_text()[-4000:]
        raise RuntimeError(f"{self.spec['label']} stopped; the end of its log:\n{tail}")

    def run(self, batch, round_):
        self.proc.stdin.write(json.dumps({"batch": batch, "round": round_}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=120)
        except Exception:
            self.proc.kill()
        self.log.close()


def median(values):
    return statistics.median(values) if values else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--models", default="tiny,100m")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--legacy", default="", help="also run vLLM's own runner on tpu in these modes (fused,eager)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds a worker may take to start")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))

    batches = [int(b) for b in args.batches.split(",")]
    rows = [["model", "batch", "engine", "prefill tok/s", "decode tok/s", "decode vs CPU", "prefill vs CPU",
             "host ms/step", "host CPU ms/step", "compiles after warm-up", "same tokens"]]
    data = {"runs": []}
    plot = {}
    with tempfile.TemporaryDirectory(prefix="vllm_bench_") as tmp:
        tmp = pathlib.Path(tmp)
        for name in args.models.split(","):
            model_dir, params, vocab = save_model(name, tmp)
            engines = [("cpu", None), ("tpu", "program")] + [("tpu", m) for m in args.legacy.split(",") if m]
            common = {"model": str(model_dir), "vocab": vocab, "batches": batches, "prompt_len": args.prompt_len,
                      "max_tokens": args.max_tokens, "max_len": MODELS[name]["max_position_embeddings"]}
            workers = [Worker({**common, "engine": e, "mode": m, "label": f"{name}_{e}_{m}"}, tmp, args.timeout)
                       for e, m in engines]
            try:
                results = {w.spec["label"]: {b: [] for b in batches} for w in workers}
                for r in range(args.rounds):
                    for b in batches:
                        for w in (workers if r % 2 == 0 else workers[::-1]):  # alternate who goes first
                            results[w.spec["label"]][b].append(w.run(b, r))
            finally:
                for w in workers:
                    w.close()
            reference = results[workers[0].spec["label"]]
            for w in workers:
                label = "vLLM CPU engine" if w.spec["engine"] == "cpu" else f"tpu ({w.spec['mode']})"
                for b in batches:
                    rs = results[w.spec["label"]][b]
                    prefill = median([x["prompt_tokens"] / x["prefill_s"] for x in rs])
                    decode = median([b * (args.max_tokens - 1) / max(x["full_s"] - x["prefill_s"], 1e-9) for x in rs])
                    ref = reference[b]
                    ref_prefill = median([x["prompt_tokens"] / x["prefill_s"] for x in ref])
                    ref_decode = median([b * (args.max_tokens - 1) / max(x["full_s"] - x["prefill_s"], 1e-9) for x in ref])
                    same = all(x["tokens"] == y["tokens"] for x, y in zip(rs, ref))
                    host = median([x["host_ms_per_step"] for x in rs if "host_ms_per_step" in x])
                    host_cpu = median([x["host_cpu_ms_per_step"] for x in rs if "host_cpu_ms_per_step" in x])
                    compiles = sum(x.get("compiles", 0) for x in rs)
                    is_cpu = w.spec["engine"] == "cpu"
                    rows.append([name, b, label, f"{prefill:.0f}", f"{decode:.1f}",
                                 "-" if is_cpu else f"{decode / ref_decode:.2f}x",
                                 "-" if is_cpu else f"{prefill / ref_prefill:.2f}x",
                                 "-" if is_cpu or host != host else f"{host:.2f}",
                                 "-" if is_cpu or host_cpu != host_cpu else f"{host_cpu:.2f}",
                                 "-" if is_cpu else compiles, "-" if is_cpu else ("yes" if same else "no")])
                    data["runs"].append({"model": name, "params": params, "batch": b, "engine": w.spec["engine"],
                                         "mode": w.spec["mode"], "prefill_tok_s": prefill, "decode_tok_s": decode,
                                         "host_ms_per_step": None if host != host else host,
                                         "host_cpu_ms_per_step": None if host_cpu != host_cpu else host_cpu,
                                         "compiles_after_warmup": compiles, "same_tokens_as_cpu": same,
                                         "warmup_programs": w.ready.get("warmup_programs"),
                                         "rounds": [{k: v for k, v in x.items() if k != "tokens"} for x in rs]})
                    plot.setdefault(name, {}).setdefault(label, []).append((b, decode))
    data["settings"] = {"batches": batches, "rounds": args.rounds, "prompt_len": args.prompt_len,
                        "max_tokens": args.max_tokens, "dtype": "float32", "greedy": True, "prefix_caching": False}
    notes = [
        f"Batches of {', '.join(map(str, batches))} prompts of {args.prompt_len // 2}-{args.prompt_len} tokens, "
        f"{args.max_tokens} output tokens each, greedy, float32, random weights; medians of {args.rounds} "
        "rounds with the engines interleaved (each loaded once in its own worker process, warmed up with the "
        "same loop on other prompts).",
        "prefill = prompt tokens / time of generate(max_tokens=1); decode = (generated tokens - 1 per prompt) / "
        "(time of generate(max_tokens=T) - prefill time).",
        "host ms/step: a decode step's wall time minus the time the host waited for the device (for results, and "
        "in a replay for the previous step's launch to reach PJRT) - vLLM's scheduler and output processing, the "
        "request table, packing, upload and dispatch; with asynchronous scheduling it overlaps the device's work. Here the device is the same 2 cores, so the host's work is slowed by XLA's "
        "threads running the step beside it; host CPU ms/step is the CPU time the step loop's thread itself used "
        "per step (time.thread_time: vLLM's scheduler, our runner, packing and dispatch; not the launcher thread, "
        "whose PJRT Execute runs the program on this plugin), what that work costs on a host of its own.",
        "tpu here is XLA's CPU PJRT plugin on the same 2 cores as vLLM's CPU engine (its own oneDNN/C++ kernels, "
        "enforce_eager); the step runner runs each step as one program (TORCH_TPU_VLLM_MODE=program).",
    ]
    if args.no_write:
        print(json.dumps(data, indent=2))
        for row in rows:
            print(" | ".join(str(c) for c in row))
        return
    sys.path.insert(0, str(HERE))
    from _results import write
    from _svg_plot import line_chart

    write("vllm_throughput", "vLLM offline throughput: tpu (one program per step) vs vLLM's CPU engine",
          data, rows, notes)
    for name, series in plot.items():
        line_chart(str(HERE / "results" / f"vllm_throughput_{name}.svg"),
                   f"vLLM decode throughput, {name} model", "batch (requests)", "decode tokens/s",
                   series, x_ticks=[(b, str(b)) for b in batches])


if __name__ == "__main__":
    main()
