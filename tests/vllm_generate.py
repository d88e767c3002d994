"""Runs vLLM offline generation for tests/test_vllm_tpu.py inside .venv-serve.

usage: vllm_generate.py MODEL_DIR {tpu,cpu} REQUEST_JSON OUT_JSON
REQUEST_JSON: {"prefix_caching": bool, "seed": engine seed, "engine": {extra LLM(...) arguments},
               "jobs": [{"prompts": [[token ids], ...], "max_tokens": n or [n per prompt],
                         "temperature": t, "top_p": p, "seed": per-request seed,
                         "params": {more SamplingParams fields} or [one dict per prompt],
                         "logprobs": n}, ...]}
OUT_JSON: {"platform": ..., "jobs": [{"tokens": [[...]], "logprobs": [[...]], "top_logprobs": [[{id: lp}]],
           "compiles": programs compiled, "steps": engine steps, "executions": device programs run,
           "programs": step programs captured, "background_compiles": step programs compiled in
           the background}, ...],
           "fallbacks": {op: count} of the generate calls on tpu,
           "weight_layouts": {"packed": n, "input_major": n} linear weights laid out on tpu}
"""

import json
import os
import sys


def _compiles(engine):
    if engine != "tpu":
        return 0
    import torch

    return int(torch.tpu.compilation_cache_stats()["compiles"])


def _weight_layouts(engine):
    """How many linear weights the tpu runner packed for the host matmul kernel / left input-major."""
    if engine != "tpu":
        return {}
    from torch_tpu.serving import weights

    return dict(weights.LAYOUTS)


def _step_counters(engine):
    """(device program executions, step runner steps, step programs captured, step programs
    compiled in the background) so far."""
    if engine != "tpu":
        return 0, 0, 0, 0
    import torch

    from torch_tpu.vllm.execution import selected_mode

    executions = int(torch.tpu.compilation_cache_stats()["executions"])
    if selected_mode() != "program":
        return executions, 0, 0, 0
    from torch_tpu.vllm.model_runner import program_stats

    stats = program_stats()
    return executions, stats["steps"], stats["captures"], stats["background_compiles"]


def _mode(engine):
    if engine != "tpu":
        return None
    from torch_tpu.vllm.execution import selected_mode

    return selected_mode()


def main():
    model_dir, engine, request_path, out_path = sys.argv[1:5]
    if engine not in ("tpu", "cpu"):
        raise SystemExit(f"engine must be tpu or cpu, got {engine!r}")
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    # One process: the engine core runs here, so fallback counts are this process's.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if engine == "cpu":
        os.environ["TORCH_TPU_VLLM"] = "0"  # our plugin steps aside
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    request = json.load(open(request_path))

    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.platforms import current_platform

    engine_args = dict(
        model=model_dir,
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=128,
        max_num_seqs=4,
        seed=request.get("seed", 0),
        enforce_eager=True,
        enable_prefix_caching=request.get("prefix_caching", False),
        kv_cache_memory_bytes=64 * 1024 * 1024,
    )
    engine_args.update(request.get("engine", {}))
    llm = LLM(**engine_args)
    if engine == "tpu":
        import torch_tpu

        torch_tpu.reset_fallback_counts()
    jobs = []
    for job in request["jobs"]:
        # max_tokens may be one per prompt: requests then finish at different steps and
        # waiting prompts are prefilled in the same step as running decodes.
        counts = job["max_tokens"] if isinstance(job["max_tokens"], list) else [job["max_tokens"]] * len(job["prompts"])
        extra = job.get("params", {})
        extra = extra if isinstance(extra, list) else [extra] * len(counts)
        # JSON object keys are strings; SamplingParams wants token ids.
        extra = [{**e, "logit_bias": {int(k): v for k, v in e["logit_bias"].items()}} if "logit_bias" in e else e
                 for e in extra]
        params = [
            SamplingParams(
                **{
                    "temperature": job.get("temperature", 0.0),
                    "top_p": job.get("top_p", 1.0),
                    "seed": job.get("seed"),
                    "max_tokens": n,
                    "logprobs": job.get("logprobs", 0),
                    "ignore_eos": True,
                    "detokenize": False,
                    **more,
                }
            )
            for n, more in zip(counts, extra)
        ]
        prompts = [TokensPrompt(prompt_token_ids=p) for p in job["prompts"]]
        if engine == "tpu":
            # A bucket compiled in the background is captured by the first step that uses it
            # once ready: waiting for those compiles here makes each job's counts independent
            # of how long they took.
            from torch_tpu import _C

            _C._wait_background_compiles()
        compiles_before = _compiles(engine)
        counters_before = _step_counters(engine)
        outputs = llm.generate(prompts, params, use_tqdm=False)
        counters = [b - a for a, b in zip(counters_before, _step_counters(engine))]
        jobs.append(
            {
                # programs compiled (device) during this job: 0 once warm
                "compiles": _compiles(engine) - compiles_before,
                "executions": counters[0],
                "steps": counters[1],
                "programs": counters[2],
                "background_compiles": counters[3],
                "top_logprobs": [
                    [{str(k): float(v.logprob) for k, v in step.items()} for step in o.outputs[0].logprobs]
                    for o in outputs
                ],
                "tokens": [list(o.outputs[0].token_ids) for o in outputs],
                "logprobs": [
                    [float(step[tok].logprob) for step, tok in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)]
                    for o in outputs
                ],
            }
        )
    config = llm.llm_engine.vllm_config
    result = {
        "kv_cache_tokens": int(config.cache_config.num_gpu_blocks) * int(config.cache_config.block_size),
        "max_num_seqs": int(config.scheduler_config.max_num_seqs),
        "platform": type(current_platform).__name__,
        "device_type": current_platform.device_type,
        "vllm": vllm.__version__,
        "jobs": jobs,
        "mode": _mode(engine),
        "fallbacks": torch_tpu.fallback_counts() if engine == "tpu" else {},
        "weight_layouts": _weight_layouts(engine),
    }
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
