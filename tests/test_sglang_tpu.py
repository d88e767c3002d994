"""SGLang on tpu through torch_tpu's SGLang platform plugin (torch_tpu/sglang/).

SGLang runs in .venv-serve beside vLLM (scripts/setup_serving.sh installs it without its CUDA
dependencies). Each test starts `python -m sglang.launch_server` on 127.0.0.1 with a tiny model
built from a config, talks to it over HTTP from that environment (tests/sglang_client.py) and
compares with Transformers on the CPU: greedy tokens for prompts of different lengths, one at a
time and batched; prompts sharing a prefix through the radix cache; seeded sampling; OpenAI
completions and chat, streamed and not; malformed and unsupported requests (400, the server keeps
serving); SIGINT. The server runs with TORCH_TPU_FALLBACK=error (any CPU fallback fails the step)
and writes its step runner's counters (TORCH_TPU_SERVING_STATS) for the program-count checks.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from serving_helpers import SERVE_PY, free_port, needs_serve, save_tiny, serve_env, transformers_greedy, wait_healthy
from side_by_side import side_by_side

CLIENT = pathlib.Path(__file__).with_name("sglang_client.py")
MAX_TOKENS = 8
PROMPTS = [[1, 5, 9, 42, 7], [3, 8, 100, 2, 17, 33, 64, 12, 90, 11, 4], [250, 6, 77]]
SHARED = [(7 * i + 3) % 250 + 3 for i in range(40)]
TEXT_PROMPT = [10, 20, 30]  # "w10 w20 w30" in tests/vllm_assets.py's word tokenizer (no special ids)


@contextmanager
def _healthy_server(model_dir, tmp_path, extra=(), env_extra=None):
    """A running, healthy server: (process, base URL, stats path, log path); killed on exit."""
    proc, base, stats, log = _serve(model_dir, tmp_path, extra, env_extra)
    try:
        assert wait_healthy(proc, f"{base}/health", timeout=420), log.read_text()[-6000:]
        yield proc, base, stats, log
    finally:
        _stop(proc)


def _serve(model_dir, tmp_path, extra=(), env_extra=None):
    """Starts the server; returns (process, base URL, stats path, log path)."""
    from vllm_assets import save_word_tokenizer

    save_word_tokenizer(model_dir)
    port = free_port()
    stats = tmp_path / "stats.json"
    env = serve_env(TORCH_TPU_FALLBACK="error", TORCH_TPU_SERVING_STATS=str(stats), **(env_extra or {}))
    log_path = tmp_path / "server.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [str(SERVE_PY), "-m", "sglang.launch_server", "--model-path", str(model_dir), "--served-model-name", "tiny",
         "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", *extra],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True,
    )
    log.close()
    return proc, f"http://127.0.0.1:{port}", stats, log_path


def _group_alive(pgid) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_platform_plugin_selects_tpu(tmp_path):
    if not SERVE_PY.exists():
        pytest.skip("the serving engines run in .venv-serve, which is absent: run ./scripts/setup_serving.sh")
    code = ("from sglang.srt.platforms import current_platform as p; "
            "print(type(p).__name__, p.device_type, p.is_out_of_tree(), p.get_device(), p.get_default_attention_backend())")
    env = serve_env()
    # Both interpreters import SGLang (~12 s each here): they run side by side.
    on, off = side_by_side(subprocess.run, *[(([str(SERVE_PY), "-c", code],),
                                              dict(capture_output=True, text=True, env=e, cwd=tmp_path, timeout=300))
                                             for e in (env, dict(env, TORCH_TPU_SGLANG="0"))])
    assert on.returncode == 0, on.stderr[-4000:]
    assert on.stdout.split()[-5:] == ["TpuSRTPlatform", "tpu", "True", "tpu", "tpu"]
    assert "TpuSRTPlatform" not in off.stdout


@needs_serve
@pytest.mark.slow
def test_sglang_server_on_tpu(tmp_path):
    model_dir, model = save_tiny("llama", tmp_path / "tiny_llama")
    with _healthy_server(model_dir, tmp_path) as (proc, base, stats, log):
        request = tmp_path / "request.json"
        shared = [SHARED + [11, 12], SHARED + [200, 5, 9, 14], SHARED]
        request.write_text(json.dumps({"prompts": PROMPTS, "shared": shared, "text_prompt": TEXT_PROMPT,
                                       "max_tokens": MAX_TOKENS, "stats": str(stats)}))
        out = tmp_path / "client.json"
        client = subprocess.run([str(SERVE_PY), str(CLIENT), base, "tiny", str(request), str(out)],
                                env=serve_env(), capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert client.returncode == 0, client.stderr[-6000:] + log.read_text()[-4000:]
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=120)
        for _ in range(60):  # its children finish their own shutdown
            if not _group_alive(proc.pid):
                break
            time.sleep(0.5)
    r = json.loads(out.read_text())
    expected = [transformers_greedy(model, p, MAX_TOKENS) for p in PROMPTS]
    assert r["single"] == expected
    assert r["batched"] == expected and r["batched_again"] == expected
    shared_expected = [transformers_greedy(model, p, MAX_TOKENS) for p in shared]
    assert r["shared_first"] == shared_expected and r["shared_again"] == shared_expected
    assert all(c >= 32 for c in r["cached_tokens"]), r["cached_tokens"]  # the radix cache served the prefix
    # Seeded sampling: the same seed gives the same tokens, alone or in a batch; another seed differs.
    assert r["seeded"][0] == r["seeded"][1] == r["seeded_in_batch"]
    assert r["other_seed"] != r["seeded"][0]
    # OpenAI-compatible endpoints through the openai client: text completions (the word tokenizer
    # spells token t as "w<t>") and chat, streamed and not.
    assert r["completion_text"].split() == [f"w{t}" for t in transformers_greedy(model, TEXT_PROMPT, MAX_TOKENS)]
    assert r["completion_stream_text"] == r["completion_text"] and r["completion_finish"] == "length"
    assert r["chat_content"].split() and r["chat_finish"] == "length"
    assert r["chat_stream_content"] == r["chat_content"]
    assert r["bad_json_status"] == 400 and r["bad_params_status"] == 400
    assert r["unsupported_status"] == 400 and "return_logprob" in r["unsupported_body"]
    assert r["health_after"] == 200
    # One device program per step and nothing compiled for repeated buckets; no CPU fallback.
    before, after, end = r["stats_before"], r["stats_after"], r["stats_end"]
    assert after["steps"] > before["steps"]
    assert after["executions"] - before["executions"] == after["steps"] - before["steps"]
    warm, again = r["stats_warm"], r["stats_again"]
    assert again["steps"] > warm["steps"] and again["compiles"] == warm["compiles"]
    assert again["captures"] == warm["captures"]
    assert end["fallbacks"] == {} and end["rerecorded_steps"] == 0
    # SIGINT: the server and its scheduler and detokenizer processes are gone. SGLang's launcher
    # ends by re-raising the KeyboardInterrupt (exit by SIGINT, or 130), as it does on every device.
    assert rc in (0, -signal.SIGINT, 130), log.read_text()[-4000:]
    assert not _group_alive(proc.pid)
    serving_log = log.read_text().split("Shutting down")[0]
    assert "Traceback" not in serving_log, serving_log[-6000:]


@needs_serve
@pytest.mark.slow
def test_sglang_qwen3_matches_transformers(tmp_path):
    """Qwen3 (per-head q/k RMSNorm before rotary) through SGLang's model code on tpu, with every
    linear weight packed for the host matmul kernel (the threshold lowered for the tiny model)."""
    model_dir, model = save_tiny("qwen3", tmp_path / "tiny_qwen3")
    with _healthy_server(model_dir, tmp_path, env_extra={"TORCH_TPU_PACK_MIN_ELEMENTS": "1"}) as (proc, base, stats, log):
        code = ("import json, sys, urllib.request; "
                "req = urllib.request.Request(sys.argv[1] + '/generate', data=json.dumps({'input_ids': json.loads(sys.argv[2]), "
                "'sampling_params': {'temperature': 0, 'max_new_tokens': int(sys.argv[3]), 'ignore_eos': True}}).encode(), "
                "headers={'Content-Type': 'application/json'}); "
                "print(json.dumps([o['output_ids'] for o in json.loads(urllib.request.urlopen(req, timeout=300).read())]))")
        got = subprocess.run([sys.executable, "-c", code, base, json.dumps(PROMPTS), str(MAX_TOKENS)],
                             capture_output=True, text=True, timeout=600, env=serve_env())
        assert got.returncode == 0, got.stderr[-4000:] + log.read_text()[-4000:]
    assert json.loads(got.stdout) == [transformers_greedy(model, p, MAX_TOKENS) for p in PROMPTS]
    # 2 layers x (qkv, o, gate_up, down) and the logits head.
    assert json.loads(stats.read_text())["weight_layouts"] == {"packed": 9}
