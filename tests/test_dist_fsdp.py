"""FSDP2 on tpu: the reference Llama built on the meta device, sharded with fully_shard per block,
materialized with to_empty(device="tpu") and reset_parameters; its parameters are Shard(0)
DTensors on tpu, and training it on 2 ranks equals single-process training on the global batch
on the CPU. bfloat16 mixed precision (MixedPrecisionPolicy) trains too."""

import math

import pytest
import torch

from dist_harness import run_processes
from dist_reference_training import CONFIG, initial_state, train_single, train_slices

STEPS = 3


def fsdp_train(rank, world_size, mixed=False):
    import torch_tpu
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor, Shard

    from models.llama import Llama, rotary_tables

    with torch.device("meta"):
        model = Llama(CONFIG)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed \
        else MixedPrecisionPolicy()
    for block in model.layers:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    model.to_empty(device="tpu")
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    cos, sin = rotary_tables(CONFIG.dim // CONFIG.n_heads, CONFIG.max_seq_len, CONFIG.rope_theta)
    model.cos, model.sin = cos.to("tpu"), sin.to("tpu")

    placements = set()
    for name, p in model.named_parameters():
        assert isinstance(p, DTensor), name
        assert p.device.type == "tpu" and p.to_local().device.type == "tpu", name
        assert bool(torch.isfinite(p.to_local()).all()), f"{name} after reset_parameters"
        placements.add(tuple(p.placements))
    assert placements == {(Shard(0),)}, placements

    # The same weights as the reference, loaded from a full state dict.
    set_model_state_dict(model, initial_state(), options=StateDictOptions(full_state_dict=True))
    losses = train_slices(model, rank, world_size, STEPS)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return losses, {k: v.float() for k, v in full.items()}, torch_tpu.fallback_counts()


@pytest.fixture(scope="module")
def reference():
    return train_single(torch.device("cpu"), STEPS)


def test_fsdp2_equals_single_process(reference):
    ref_losses, ref_state = reference
    results = run_processes(fsdp_train, timeout=300)
    for step, ref in enumerate(ref_losses):
        mean = sum(r[0][step] for r in results) / len(results)
        assert abs(mean - ref) < 1e-4, (step, mean, ref)
    for rank, (_, state, fallbacks) in enumerate(results):
        assert fallbacks == {}, f"rank {rank} fell back to the CPU: {fallbacks}"
        # A full state dict offloaded to the CPU is gathered on rank 0 only.
        assert set(state) == (set(ref_state) if rank == 0 else set())
        for name, value in state.items():
            torch.testing.assert_close(value, ref_state[name], rtol=1e-4, atol=1e-5,
                                       msg=lambda m: f"rank {rank} {name}: {m}")


def test_fsdp2_bfloat16_mixed_precision_trains(reference):
    ref_losses, _ = reference
    results = run_processes(fsdp_train, args=(True,), timeout=300)
    for rank, (losses, state, fallbacks) in enumerate(results):
        assert fallbacks == {}, f"rank {rank} fell back to the CPU: {fallbacks}"
        assert all(math.isfinite(v) for v in losses)
        assert all(torch.isfinite(v).all() for v in state.values())
    for step, ref in enumerate(ref_losses):
        mean = sum(r[0][step] for r in results) / len(results)
        # bf16 compute: the same trajectory within bf16 rounding.
        assert abs(mean - ref) < 3e-2, (step, mean, ref)
