"""torchtitan 0.3 on the tpu device, through its own entry point (torchtitan.train.main under
torchrun): the Qwen3 debug model trains on tpu and matches the same run on the CPU step by step;
2 ranks with FSDP over tpu_dist match one CPU rank on the same global batches; the Llama 3 debug
model (complex RoPE: view_as_complex, complex mul, view_as_real) trains on tpu like on the CPU.

Everything is local: a word-level tokenizer and JSON-lines datasets generated into tmp, a seed
checkpoint (torchtitan's --checkpoint.create_seed_checkpoint) so both devices start from the same
weights, torchrun --standalone on loopback with a hard timeout."""

import math
import os

import pytest
import torch

import torch_tpu  # noqa: F401

pytest.importorskip("torchtitan", reason="torchtitan is not installed")
pytest.importorskip("triton", reason="torchtitan 0.3 imports triton at start-up (MoE kernels)")

from eco_titan_assets import interleave_for_ranks, make_documents, write_dataset, write_tokenizer  # noqa: E402
from eco_titan_run import common_args, load_checkpoint_args, run_titan  # noqa: E402
from side_by_side import side_by_side  # noqa: E402

SEQ_LEN = 32
STEPS = 3
RANKS = 2
# Per rank in the FSDP run. The single-rank runs accumulate RANKS microbatches of LOCAL_BATCH:
# the same global batch, and the same op shapes (so they share compiled programs).
LOCAL_BATCH = 2


@pytest.fixture(scope="module")
def titan(tmp_path_factory):
    """Tokenizer, datasets, a seed checkpoint and the CPU reference losses (one rank, the global
    batch of RANKS * LOCAL_BATCH documents in the order the FSDP ranks read them together)."""
    root = tmp_path_factory.mktemp("titan")
    docs = make_documents(64, SEQ_LEN)
    assets = {
        "root": str(root),
        "tokenizer": write_tokenizer(str(root / "tokenizer")),
        "sharded": write_dataset(str(root / "data_sharded"), docs),
        "merged": write_dataset(str(root / "data_merged"), interleave_for_ranks(docs, RANKS, LOCAL_BATCH)),
    }
    seed_dump = str(root / "seed_run")
    run_titan(common_args(assets["tokenizer"], assets["merged"], seed_dump, seq_len=SEQ_LEN,
                          local_batch=LOCAL_BATCH, steps=STEPS)
              + ["--checkpoint.enable", "--checkpoint.create_seed_checkpoint", "--checkpoint.folder", "seed"],
              device="cpu", workdir=str(root / "seed_work"))
    assets["seed"] = os.path.join(seed_dump, "seed", "step-0")
    assert os.path.isdir(assets["seed"]), os.listdir(seed_dump)
    assets["cpu"] = run_titan(single_rank_args(assets, "cpu_run"), device="cpu", workdir=str(root / "cpu_work"))
    return assets


def single_rank_args(assets, name):
    return (common_args(assets["tokenizer"], assets["merged"], os.path.join(assets["root"], name),
                        seq_len=SEQ_LEN, local_batch=LOCAL_BATCH, global_batch=RANKS * LOCAL_BATCH, steps=STEPS)
            + load_checkpoint_args(assets["seed"]))


def assert_trains(result, device, world_size):
    assert result["device"] == device
    assert result["world_size"] == world_size
    losses = [result["losses"][step] for step in range(1, STEPS + 1)]
    assert all(math.isfinite(loss) for loss in losses), losses
    assert losses[-1] < losses[0] - 0.1, f"loss did not decrease: {losses}"
    return losses


def assert_matches_cpu(result, cpu_result):
    losses, cpu_losses = result["losses"], cpu_result["losses"]
    # Same weights, same batches: the first loss is one forward pass apart.
    torch.testing.assert_close(losses[1], cpu_losses[1], rtol=2e-4, atol=0)
    for step in range(2, STEPS + 1):
        torch.testing.assert_close(losses[step], cpu_losses[step], rtol=2e-3, atol=0,
                                   msg=lambda m, s=step: f"step {s}: {m}")


def test_qwen3_debugmodel_trains_on_tpu_like_cpu(titan):
    cpu = titan["cpu"]
    assert_trains(cpu, "cpu", 1)
    result = run_titan(single_rank_args(titan, "tpu_run"), device="tpu",
                       workdir=os.path.join(titan["root"], "tpu_work"))
    assert_trains(result, "tpu", 1)
    # torchtitan chose the backend from Backend.default_device_backend_map["tpu"].
    assert result["backend"] == "tpu_dist"
    assert result["fallbacks"] == {}, result["fallbacks"]  # rope.py's _assert_async, fused AdamW included
    assert_matches_cpu(result, cpu)


def test_qwen3_fsdp_two_ranks_over_tpu_dist(titan):
    args = (common_args(titan["tokenizer"], titan["sharded"], os.path.join(titan["root"], "fsdp_run"),
                        seq_len=SEQ_LEN, local_batch=LOCAL_BATCH, steps=STEPS)
            + load_checkpoint_args(titan["seed"])
            + ["--parallelism.data_parallel_shard_degree", str(RANKS),
               "--training.mixed_precision_param", "float32"])
    result = run_titan(args, device="tpu", workdir=os.path.join(titan["root"], "fsdp_work"), nproc=RANKS,
                       timeout=400)
    assert_trains(result, "tpu", RANKS)
    assert result["backend"] == "tpu_dist"
    assert result["fallbacks"] == {}, result["fallbacks"]  # rope.py's _assert_async, fused AdamW included
    # The ranks' batches together are the single CPU rank's batch at every step.
    assert_matches_cpu(result, titan["cpu"])


LLAMA3_ARGS = ["--module", "eco_titan_config", "--config", "llama3_debugmodel_tpu"]


@pytest.mark.slow
def test_llama3_debugmodel_trains_on_tpu_like_cpu(titan):
    """Llama 3's RoPE keeps a complex64 buffer (freqs_cis) and rotates q and k with
    view_as_complex / complex mul / view_as_real: the run trains on tpu with no CPU fallback and
    matches the same run on the CPU from the same seed checkpoint."""
    root = titan["root"]
    seed_dump = os.path.join(root, "llama_seed_run")
    base = common_args(titan["tokenizer"], titan["merged"], seed_dump, seq_len=SEQ_LEN,
                       local_batch=LOCAL_BATCH, steps=STEPS)
    run_titan(base + ["--checkpoint.enable", "--checkpoint.create_seed_checkpoint", "--checkpoint.folder", "seed"],
              device="cpu", workdir=os.path.join(root, "llama_seed_work"), model_args=LLAMA3_ARGS)
    seed = os.path.join(seed_dump, "seed", "step-0")

    def job(device):
        args = (common_args(titan["tokenizer"], titan["merged"], os.path.join(root, f"llama_{device}_run"),
                            seq_len=SEQ_LEN, local_batch=LOCAL_BATCH, global_batch=RANKS * LOCAL_BATCH,
                            steps=STEPS)
                + load_checkpoint_args(seed))
        return (args,), dict(device=device, workdir=os.path.join(root, f"llama_{device}_work"), model_args=LLAMA3_ARGS)

    cpu, result = side_by_side(run_titan, job("cpu"), job("tpu"))  # independent runs
    assert_trains(cpu, "cpu", 1)
    assert_trains(result, "tpu", 1)
    assert result["fallbacks"] == {}, result["fallbacks"]
    assert_matches_cpu(result, cpu)
