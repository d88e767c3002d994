"""Hugging Face's Trainer and accelerate on tpu (torch_tpu/integrations/accelerate.py): with
default arguments Trainer trains on tpu the way it trains on cuda, and its losses equal the same
training on the CPU; use_cpu=True still means the CPU; the hook reaches accelerate whether it is
imported before or after torch_tpu; launched as two processes (torchrun) it trains over tpu_dist
like the same launch on the CPU trains over gloo. Each case runs in a fresh interpreter
(accelerate's state is process-wide)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("accelerate", reason="the accelerate tests need accelerate (requirements-test.txt)")
pytest.importorskip("transformers", reason="the Trainer tests need transformers (requirements-test.txt)")

_TRAIN = """
import json, sys, tempfile, torch
{first}
import torch_tpu
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2))
class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 16
    def __getitem__(self, i):
        ids = (torch.arange(8) * (i + 3)) % 64
        return {{"input_ids": ids, "labels": ids}}
args = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=3, per_device_train_batch_size=4, report_to=[],
                         save_strategy="no", logging_steps=1, seed=0, data_seed=0, dataloader_num_workers=0,
                         use_cpu={use_cpu})
trainer = Trainer(model=model, args=args, train_dataset=Data())
trainer.train()
losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
dist = torch.distributed
result = json.dumps({{"args_device": str(args.device), "model_device": str(next(model.parameters()).device),
                     "losses": losses, "rank": dist.get_rank() if dist.is_initialized() else 0,
                     "world": dist.get_world_size() if dist.is_initialized() else 1,
                     "backend": dist.get_backend() if dist.is_initialized() else None}})
import os
if os.environ.get("RESULT_DIR"):  # ranks share stdout: each writes its own file
    with open(os.path.join(os.environ["RESULT_DIR"], f"rank{{dist.get_rank()}}.json"), "w") as f:
        f.write(result)
print("RESULT " + result)
"""


def _run(use_cpu=False, accelerate_first=False, ranks=1, tmp_path=None):
    first = "import accelerate.state" if accelerate_first else ""
    code = _TRAIN.format(first=first, use_cpu=use_cpu)
    if ranks == 1:
        cmd = [sys.executable, "-c", code]
    else:  # torchrun on loopback (--standalone), one process per rank
        script = tmp_path / "train.py"
        script.write_text(code)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", str(script)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TORCH_TPU_CPU_DEVICE_COUNT", None)  # each process: the plugin's one device
    if ranks > 1:
        out_dir = tmp_path / f"results_{use_cpu}"
        out_dir.mkdir()
        env["RESULT_DIR"] = str(out_dir)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    if ranks == 1:
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
        return json.loads(line[7:])
    files = sorted(out_dir.glob("rank*.json"))
    assert len(files) == ranks, proc.stdout[-2000:]
    return min((json.loads(f.read_text()) for f in files), key=lambda r: r["rank"])


@pytest.mark.parametrize("accelerate_first", [False, True])
def test_trainer_with_default_arguments_trains_on_tpu_like_the_cpu(accelerate_first):
    tpu = _run(accelerate_first=accelerate_first)
    assert tpu["args_device"] == "tpu:0" and tpu["model_device"] == "tpu:0", tpu
    cpu = _run(use_cpu=True)
    assert cpu["args_device"] == "cpu" and cpu["model_device"] == "cpu", cpu
    assert len(tpu["losses"]) == len(cpu["losses"]) == 3
    for a, b in zip(tpu["losses"], cpu["losses"]):
        assert abs(a - b) <= 1e-3 * max(1.0, abs(b)), (tpu["losses"], cpu["losses"])


def test_trainer_under_torchrun_trains_over_tpu_dist_like_gloo_on_the_cpu(tmp_path):
    tpu = _run(ranks=2, tmp_path=tmp_path)
    assert (tpu["backend"], tpu["world"], tpu["args_device"], tpu["model_device"]) == ("tpu_dist", 2, "tpu:0", "tpu:0"), tpu
    cpu = _run(use_cpu=True, ranks=2, tmp_path=tmp_path)
    assert (cpu["backend"], cpu["world"]) == ("gloo", 2) and cpu["args_device"].startswith("cpu"), cpu
    assert len(tpu["losses"]) == len(cpu["losses"]) == 3
    for a, b in zip(tpu["losses"], cpu["losses"]):
        assert abs(a - b) <= 1e-3 * max(1.0, abs(b)), (tpu["losses"], cpu["losses"])
