"""Offline vLLM throughput on ``tpu`` (torch_tpu's platform plugin) vs vLLM's own CPU engine.

Run with the serving environment:  .venv-serve/bin/python benchmarks/vllm_throughput.py
(options: --prompts N --prompt-len L --max-tokens T --models tiny,100m --modes fused,eager,compile
--large-modes fused,eager,compile).

Each model (a tiny Llama and a ~100M-parameter Llama, both built from a config with random
weights and saved locally) is run by each engine in its own subprocess on the same prompts,
greedy. Per engine: a warm-up pass, then on new prompts of the same lengths
  prefill tokens/s = prompt tokens / time of generate(max_tokens=1)
  decode tokens/s  = (generated tokens - one per prompt) / (time of generate(max_tokens=T)
                     - prefill time)
and the device programs compiled during the measured passes (0 = no recompiles once warm).
The ``tpu`` device here is XLA's CPU PJRT plugin on the same cores as vLLM's CPU engine.
Results: benchmarks/results/vllm_throughput.{json,md}.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

# head_dim 32 / 64: head sizes both vLLM's CPU attention and ours support.
MODELS = {
    "tiny": dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=False),
    "100m": dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                 num_attention_heads=12, num_key_value_heads=12, head_dim=64, tie_word_embeddings=True),
}


def save_model(name, root):
    import torch
    import transformers

    path = root / name
    config = transformers.LlamaConfig(max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
                                      pad_token_id=0, **MODELS[name])
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(path, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    return path, params, config.vocab_size


def prompt_sets(vocab, count, length):
    """Two sets (warm-up, measured) of `count` prompts with lengths spread over [length/2,
    length]; same lengths, different tokens."""
    lengths = [max(2, length // 2 + (length // 2) * i // max(1, count - 1)) for i in range(count)]
    sets = []
    for offset in (0, 7):
        sets.append([[(31 * i + 17 * j + offset) % (vocab - 3) + 3 for j in range(n)]
                     for i, n in enumerate(lengths)])
    return sets


def worker(args):
    """One engine on one model (runs in its own process)."""
    spec = json.loads(pathlib.Path(args.worker).read_text())
    os.environ.update(OFFLINE)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine in this process: its stats
    if spec["engine"] == "cpu":
        os.environ["TORCH_TPU_VLLM"] = "0"
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    else:
        os.environ["TORCH_TPU_VLLM_MODE"] = spec["mode"]
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.platforms import current_platform

    def compiles():
        if spec["engine"] != "tpu":
            return 0
        import torch

        return int(torch.tpu.compilation_cache_stats()["compiles"])

    warm, measured = spec["prompts"]
    llm = LLM(model=spec["model"], skip_tokenizer_init=True, dtype="float32", max_model_len=1024,
              max_num_seqs=len(warm), seed=0, enforce_eager=True,
              kv_cache_memory_bytes=256 * 1024 * 1024)

    def generate(prompts, n):
        params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, detokenize=False)
        start = time.perf_counter()
        out = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return time.perf_counter() - start, [list(o.outputs[0].token_ids) for o in out]

    t_max = spec["max_tokens"]
    generate(warm, 1)
    generate(warm, t_max)
    before = compiles()
    t_prefill, _ = generate(measured, 1)
    t_full, tokens = generate(measured, t_max)
    prompt_tokens = sum(len(p) for p in measured)
    decode_tokens = sum(len(t) for t in tokens) - len(measured)
    result = {
        "engine": spec["engine"], "mode": spec.get("mode"), "platform": type(current_platform).__name__,
        "prefill_s": t_prefill, "generate_s": t_full,
        "prefill_tok_s": prompt_tokens / t_prefill,
        "decode_tok_s": decode_tokens / max(t_full - t_prefill, 1e-9),
        "compiles_after_warmup": compiles() - before, "tokens": tokens,
    }
    pathlib.Path(spec["out"]).write_text(json.dumps(result))


def run_engine(python, model_dir, engine, mode, prompts, max_tokens, tmp, timeout):
    tag = f"{model_dir.name}_{engine}_{mode}"
    spec_path, out = tmp / f"{tag}.json", tmp / f"{tag}.out.json"
    spec_path.write_text(json.dumps({"model": str(model_dir), "engine": engine, "mode": mode,
                                     "prompts": prompts, "max_tokens": max_tokens, "out": str(out)}))
    env = dict(os.environ, **OFFLINE)
    env.pop("PYTHONPATH", None)
    start = time.perf_counter()
    proc = subprocess.run([python, __file__, "--worker", str(spec_path)], env=env, cwd=tmp,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        print(f"{tag} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
        return {"engine": engine, "mode": mode, "error": proc.stderr.strip().splitlines()[-1:]}
    result = json.loads(out.read_text())
    result["process_s"] = time.perf_counter() - start
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--models", default="tiny,100m")
    parser.add_argument("--modes", default="fused,eager,compile", help="tpu modes for the tiny model (fused, eager, compile)")
    parser.add_argument("--large-modes", default="fused",
                        help="tpu modes for the other models (eager takes minutes on the 100M model)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per engine run")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    rows, data = [["model", "params", "engine", "prefill tok/s", "decode tok/s",
                   "compiles after warm-up", "same tokens as CPU engine"]], {"runs": []}
    with tempfile.TemporaryDirectory(prefix="vllm_bench_") as tmp:
        tmp = pathlib.Path(tmp)
        for name in args.models.split(","):
            model_dir, params, vocab = save_model(name, tmp)
            prompts = prompt_sets(vocab, args.prompts, args.prompt_len)
            modes = args.modes if name == "tiny" else args.large_modes
            engines = [("cpu", None)] + [("tpu", m) for m in modes.split(",") if m]
            results = [run_engine(sys.executable, model_dir, e, m, prompts, args.max_tokens, tmp, args.timeout)
                       for e, m in engines]
            reference = results[0].get("tokens")
            for r in results:
                label = "vLLM CPU engine" if r["engine"] == "cpu" else f"tpu ({r['mode']})"
                if "error" in r:
                    rows.append([name, f"{params / 1e6:.1f}M", label, "failed", " ".join(r["error"]), "", ""])
                    continue
                same = "-" if r["engine"] == "cpu" else ("yes" if r["tokens"] == reference else "no")
                rows.append([name, f"{params / 1e6:.1f}M", label, f"{r['prefill_tok_s']:.1f}",
                             f"{r['decode_tok_s']:.1f}", r["compiles_after_warmup"] if r["engine"] == "tpu" else "-",
                             same])
                data["runs"].append({"model": name, "params": params, "same_tokens_as_cpu": same,
                                     **{k: v for k, v in r.items() if k != "tokens"}})
    data["settings"] = {"prompts": args.prompts, "prompt_len": args.prompt_len, "max_tokens": args.max_tokens,
                        "dtype": "float32", "greedy": True}
    notes = [
        f"{args.prompts} prompts of {args.prompt_len // 2}-{args.prompt_len} tokens, {args.max_tokens} "
        "output tokens each, greedy, float32, random weights; one subprocess per engine; measured on "
        "new prompts after a warm-up pass.",
        "prefill = prompt tokens / time of generate(max_tokens=1); decode = (generated tokens - 1 "
        "per prompt) / (time of generate(max_tokens=T) - prefill time).",
        "tpu here is XLA's CPU PJRT plugin sharing the host's cores with everything else; vLLM's CPU "
        "engine runs with enforce_eager=True (no Inductor) and its own C++ kernels.",
        "Modes (TORCH_TPU_VLLM_MODE): fused (default) = each step's forward as one Fused Eager "
        "program and the sampler as another; eager = op by op (Strict); compile = "
        "torch.compile(backend='tpu') with attention eager.",
    ]
    if not args.no_write:
        sys.path.insert(0, str(HERE))
        from _results import write

        write("vllm_throughput", "vLLM offline throughput: tpu vs vLLM's CPU engine", data, rows, notes)
    else:
        print(json.dumps(data, indent=2))


if __name__ == "__main__":
    main()
