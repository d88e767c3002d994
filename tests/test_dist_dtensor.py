"""DTensor on tpu: distribute_tensor and redistribute between Shard(0), Shard(1), Replicate and
Partial (uneven shards too) give back the full tensor; tensor parallelism of the Llama attention
and MLP (ColwiseParallel / RowwiseParallel) equals the unsharded model on the CPU; and a 2-D
FSDP x TP mesh on 4 ranks (slow) trains like one process."""

import pytest
import torch

from dist_harness import run_processes
from dist_reference_training import CONFIG, LR, global_batches, initial_state, train_single, train_slices


def redistribute_cases(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("tpu", (world_size,))
    full = torch.arange(5 * 7, dtype=torch.float32).reshape(5, 7)  # uneven along both dims
    out = {}
    placements = {"shard0": Shard(0), "shard1": Shard(1), "replicate": Replicate()}
    for src_name, src in placements.items():
        d = distribute_tensor(full.to("tpu"), mesh, [src])
        assert d.to_local().device.type == "tpu"
        out[f"{src_name}/local_shape"] = torch.tensor(d.to_local().shape)
        for dst_name, dst in placements.items():
            r = d.redistribute(mesh, [dst])
            out[f"{src_name}->{dst_name}"] = r.full_tensor().cpu()
            out[f"{src_name}->{dst_name}/local"] = r.to_local().cpu()
    # Partial: every rank holds an addend; Replicate sums them, Shard(0) reduce-scatters.
    local = (full + rank).to("tpu")
    partial = DTensor.from_local(local, mesh, [Partial()])
    out["partial->replicate"] = partial.redistribute(mesh, [Replicate()]).to_local().cpu()
    out["partial->shard0"] = partial.redistribute(mesh, [Shard(0)]).full_tensor().cpu()
    mean = DTensor.from_local(local, mesh, [Partial("avg")]).redistribute(mesh, [Replicate()])
    out["partial_avg->replicate"] = mean.to_local().cpu()
    return out


def test_redistribute_gives_back_the_full_tensor():
    full = torch.arange(5 * 7, dtype=torch.float32).reshape(5, 7)
    results = run_processes(redistribute_cases, timeout=240)
    world_size = len(results)
    expected_sum = world_size * full + sum(range(world_size))
    for rank, out in enumerate(results):
        for key, value in out.items():
            if key.endswith("/local") or key.endswith("/local_shape") or key.startswith("partial"):
                continue
            torch.testing.assert_close(value, full, msg=lambda m: f"rank {rank} {key}: {m}")
        # The local pieces are torch.chunk's (uneven) pieces.
        assert out["shard0/local_shape"].tolist() == list(full.chunk(world_size, 0)[rank].shape)
        assert out["shard1/local_shape"].tolist() == list(full.chunk(world_size, 1)[rank].shape)
        torch.testing.assert_close(out["replicate->shard1/local"], full.chunk(world_size, 1)[rank])
        torch.testing.assert_close(out["partial->replicate"], expected_sum)
        torch.testing.assert_close(out["partial->shard0"], expected_sum)
        torch.testing.assert_close(out["partial_avg->replicate"], expected_sum / world_size)


def _tensor_parallel(model, mesh):
    from models.llama import parallelize_tensor

    parallelize_tensor(model, mesh)


def tensor_parallel_step(rank, world_size):
    import torch_tpu
    from torch.distributed.device_mesh import init_device_mesh

    from models.llama import Llama

    mesh = init_device_mesh("tpu", (world_size,))
    model = Llama(CONFIG)
    model.load_state_dict(initial_state())
    model.to("tpu")
    _tensor_parallel(model, mesh)
    # foreach=False: DTensor (sharded) and plain (replicated) parameters in one optimizer.
    opt = torch.optim.SGD(model.parameters(), lr=LR, foreach=False)
    (x, y), = global_batches(1)
    logits = model(x.to("tpu"))
    loss = model(x.to("tpu"), y.to("tpu"))
    loss.backward()
    opt.step()
    state = {}
    for name, p in model.state_dict().items():
        state[name] = (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu()
    return logits.detach().cpu(), loss.item(), state, torch_tpu.fallback_counts()


def test_tensor_parallel_llama_equals_the_unsharded_model():
    from models.llama import Llama

    model = Llama(CONFIG)
    model.load_state_dict(initial_state())
    (x, y), = global_batches(1)
    ref_logits = model(x).detach()
    ref_losses, ref_state = train_single(torch.device("cpu"), 1)
    for rank, (logits, loss, state, fallbacks) in enumerate(run_processes(tensor_parallel_step, timeout=240)):
        assert fallbacks == {}, f"rank {rank} fell back to the CPU: {fallbacks}"
        torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-5)
        assert abs(loss - ref_losses[0]) < 1e-4
        for name, value in ref_state.items():
            torch.testing.assert_close(state[name], value, rtol=1e-4, atol=1e-5,
                                       msg=lambda m: f"rank {rank} {name}: {m}")


def fsdp_tp_train(rank, world_size, steps):
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from models.llama import Llama

    mesh = init_device_mesh("tpu", (2, world_size // 2), mesh_dim_names=("dp", "tp"))
    model = Llama(CONFIG)
    model.to("tpu")
    _tensor_parallel(model, mesh["tp"])
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    set_model_state_dict(model, initial_state(), options=StateDictOptions(full_state_dict=True))
    # Ranks of one dp index share a batch slice; foreach=False: DTensor and plain parameters.
    losses = train_slices(model, mesh.get_local_rank("dp"), 2, steps, foreach=False)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return losses, dict(full)


@pytest.mark.slow
def test_fsdp_x_tensor_parallel_2d_mesh_on_4_ranks():
    steps = 2
    ref_losses, ref_state = train_single(torch.device("cpu"), steps)
    results = run_processes(fsdp_tp_train, world_size=4, args=(steps,), timeout=420)
    for step, ref in enumerate(ref_losses):
        # Ranks of one dp index share a batch half; the dp halves average to the global loss.
        mean = sum(r[0][step] for r in results) / len(results)
        assert abs(mean - ref) < 1e-4, (step, mean, ref)
    # A full state dict offloaded to the CPU is gathered on rank 0 only.
    assert set(results[0][1]) == set(ref_state)
    for name, value in ref_state.items():
        torch.testing.assert_close(results[0][1][name], value, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
