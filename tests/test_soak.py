"""The CI-sized soak (scripts/soak.py, whose long form runs 5,000 steps of the main job's model):
300 training steps of the same model at half its width, in Strict, Fused and compiled, each in
its own process, with the same
checks - memory_allocated flat, resident memory grown by less than 5%, the thread count flat, no
compile after warm-up, the program cache within its bound - plus that bound itself: a small
TORCH_TPU_CACHE_MEMORY_ENTRIES evicts the least recently used programs and results stay right."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_300_steps_in_each_mode_grow_nothing(tmp_path):
    out = tmp_path / "soak.json"
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "soak.py"), "--steps", "300", "--modes",
                        "strict,fused,compile", "--dim", "64", "--batch", "8", "--json", str(out)], env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [x["mode"] for x in results] == ["strict", "fused", "compile"]
    for x in results:
        assert all(x["checks"].values()), (x["mode"], x["checks"])
        assert x["last_loss"] < x["first_loss"]  # it trains


def test_the_program_cache_is_bounded_by_least_recent_use():
    script = """
import torch, torch_tpu
for n in range(1, 41):  # 40 shapes, each its own programs
    x = torch.arange(float(n))
    assert torch.equal((x.to("tpu") * 2 + 1).cpu(), x * 2 + 1)
stats = torch.tpu.compilation_cache_stats()
assert stats["entries"] <= 8, stats
assert stats["compiles"] > 8
x = torch.arange(1.0)  # evicted long ago: compiled again, still right
assert torch.equal((x.to("tpu") * 2 + 1).cpu(), x * 2 + 1)
print("ok")
"""
    env = {**os.environ, "TORCH_TPU_CACHE_DIR": "disabled", "TORCH_TPU_CACHE_MEMORY_ENTRIES": "8"}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    bad = subprocess.run([sys.executable, "-c", "import torch, torch_tpu; torch.ones(2, device='tpu').cpu()"],
                         env={**env, "TORCH_TPU_CACHE_MEMORY_ENTRIES": "many"}, capture_output=True, text=True,
                         timeout=240)
    assert bad.returncode != 0 and "TORCH_TPU_CACHE_MEMORY_ENTRIES='many' is not a positive count" in bad.stderr
