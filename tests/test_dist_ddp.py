"""DistributedDataParallel on tpu: the reference Llama trained by 2 ranks (each on its half of the
global batch) equals single-process training on the global batch on the CPU - losses and
parameters - on the host transport (processes) and the device transport (threads)."""

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from dist_harness import run_processes, run_threads
from dist_reference_training import initial_state, train_single, train_slices

STEPS = 3


def ddp_train(rank, world_size, mode="strict"):
    import torch_tpu
    from models.llama import Llama
    from dist_reference_training import CONFIG

    torch_tpu.execution_mode.set_mode(mode)
    model = Llama(CONFIG)
    model.load_state_dict(initial_state())
    model.to("tpu")
    losses = train_slices(DDP(model), rank, world_size, STEPS)  # DDP without device_ids
    torch_tpu.execution_mode.set_mode("strict")
    counts = torch_tpu.fallback_counts()
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}, counts


@pytest.fixture(scope="module")
def reference():
    return train_single(torch.device("cpu"), STEPS)


def _check(results, reference):
    ref_losses, ref_state = reference
    world_size = len(results)
    for step, ref in enumerate(ref_losses):
        # Each rank's loss is the mean over its half: their mean is the global batch's loss.
        mean = sum(r[0][step] for r in results) / world_size
        assert abs(mean - ref) < 1e-4, (step, mean, ref)
    for rank, (_, state, fallbacks) in enumerate(results):
        assert fallbacks == {}, f"rank {rank} fell back to the CPU: {fallbacks}"
        for name, value in ref_state.items():
            torch.testing.assert_close(state[name], value, rtol=1e-4, atol=1e-5,
                                       msg=lambda m: f"rank {rank} {name}: {m}")


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_ddp_host_transport_equals_single_process(reference, mode):
    _check(run_processes(ddp_train, args=(mode,), timeout=240), reference)


def test_ddp_device_transport_equals_single_process(reference):
    _check(run_threads(ddp_train, timeout=240), reference)
