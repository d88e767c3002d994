"""What the serving tests (test_vllm_tpu.py, test_sglang_tpu.py, the host kernels') share: the
serving environment, tiny models built from configs, Transformers' greedy reference, starting a
server on loopback with a hard timeout. (The host kernels' on/off check is helpers.check_host_kernel_switch.)"""

import os
import pathlib
import socket
import time
import urllib.request

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
SERVE_PY = ROOT / ".venv-serve" / "bin" / "python"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

needs_serve = pytest.mark.skipif(
    not SERVE_PY.exists(),
    reason="the serving engines run in .venv-serve, which is absent: run ./scripts/setup_serving.sh",
)


def serve_env(**extra):
    """Variables for a .venv-serve process: offline, without this environment's PYTHONPATH."""
    env = dict(os.environ, **OFFLINE, **extra)
    env.pop("PYTHONPATH", None)
    return env


def save_tiny(kind, path):
    """A tiny Llama or Qwen3 with random weights saved at ``path``: (path, model)."""
    os.environ.update(OFFLINE)
    import transformers

    # head_dim 32: a head size vLLM's CPU attention and ours support; 4 query heads over 2 kv
    # heads exercises grouped-query attention.
    common = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                  tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if kind == "llama":
        config, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    else:
        config, cls = transformers.Qwen3Config(**common), transformers.Qwen3ForCausalLM
    torch.manual_seed(0)
    model = cls(config).eval()
    model.save_pretrained(path, safe_serialization=True)
    return path, model


def transformers_greedy(model, prompt, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, min_new_tokens=n)
    return out[0, len(prompt):].tolist()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(proc, url, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(1)
    return False
