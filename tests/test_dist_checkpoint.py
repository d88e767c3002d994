"""torch.distributed.checkpoint on tpu: an FSDP2 model (Shard(0) DTensors on tpu) trained on 2
ranks is saved with dcp.save, and loaded back into a model of world size 1 on tpu: the loaded
parameters equal the trained model's full parameters."""

import os

import torch
import torch.distributed.checkpoint as dcp

from dist_harness import run_processes
from dist_reference_training import CONFIG, initial_state, train_slices


def fsdp_train_and_save(rank, world_size, checkpoint_dir):
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )
    from torch.distributed.fsdp import fully_shard

    from models.llama import Llama

    model = Llama(CONFIG).to("tpu")
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    set_model_state_dict(model, initial_state(), options=StateDictOptions(full_state_dict=True))
    train_slices(model, rank, world_size, 2)
    # The sharded state (each rank writes its own shards) ...
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=checkpoint_dir)
    # ... and, for the test, the full parameters it stands for.
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def test_fsdp2_checkpoint_saved_on_2_ranks_loads_into_1(tmp_path):
    from models.llama import Llama

    checkpoint_dir = str(tmp_path / "ckpt")
    results = run_processes(fsdp_train_and_save, args=(checkpoint_dir,), timeout=240)
    trained = results[0]
    assert os.path.exists(os.path.join(checkpoint_dir, ".metadata"))
    assert len([f for f in os.listdir(checkpoint_dir) if f.endswith(".distcp")]) == 2  # a file per rank

    # World size 1: a plain model on tpu, no process group.
    model = Llama(CONFIG).to("tpu")
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=checkpoint_dir)
    model.load_state_dict(state["model"])
    for name, value in model.state_dict().items():
        assert value.device.type == "tpu"
        torch.testing.assert_close(value.cpu(), trained[name], rtol=0, atol=0, msg=lambda m: f"{name}: {m}")
    initial = initial_state()
    assert any(not torch.equal(trained[n], initial[n]) for n in trained), "training changed nothing"
