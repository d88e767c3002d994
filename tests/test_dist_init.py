"""How tpu_dist groups come up: init_process_group("tpu_dist"), "cpu:gloo,tpu:tpu_dist" and no
backend at all (tpu is the accelerator) all give tpu tensors to tpu_dist, and CPU tensors and
object collectives to Gloo; the transport is chosen from where the ranks live and can be forced
with TORCH_TPU_DIST_TRANSPORT (a transport that cannot work is a clear error)."""

import pytest
import torch
import torch.distributed as dist

from dist_harness import run_processes, run_threads


def _describe(rank, world_size):
    from torch.distributed.distributed_c10d import _get_object_coll_device

    from torch_tpu.distributed import transport_of

    pg = dist.distributed_c10d._get_default_group()
    x = torch.full((3,), float(rank + 1), device="tpu")
    dist.all_reduce(x)
    c = torch.full((3,), float(rank + 1))
    dist.all_reduce(c)
    objs = [None] * world_size
    dist.all_gather_object(objs, rank)
    return {
        "tpu_backend": pg._get_backend(torch.device("tpu")).name(),
        "transport": transport_of(),
        "object_device": _get_object_coll_device(),
        "tpu_sum": x.cpu(),
        "cpu_sum": c,
        "objects": objs,
        "device_types": sorted(d.type for d in pg._device_types),
    }


@pytest.mark.parametrize("backend", ["tpu_dist", "cpu:gloo,tpu:tpu_dist", None])
def test_every_way_of_naming_the_backend(backend):
    for info in run_processes(_describe, backend=backend, timeout=120):
        assert info["tpu_backend"] == "tpu_dist", info
        assert info["transport"] == "host"
        assert info["object_device"] == "cpu"
        assert info["device_types"] == ["cpu", "tpu"]
        torch.testing.assert_close(info["tpu_sum"], torch.full((3,), 3.0))
        torch.testing.assert_close(info["cpu_sum"], torch.full((3,), 3.0))
        assert info["objects"] == [0, 1]


def test_ranks_in_one_process_use_the_device_transport_unless_forced(monkeypatch):
    assert all(i["transport"] == "device" for i in run_threads(_describe))
    monkeypatch.setenv("TORCH_TPU_DIST_TRANSPORT", "host")
    infos = run_threads(_describe)
    assert all(i["transport"] == "host" for i in infos)
    torch.testing.assert_close(infos[0]["tpu_sum"], torch.full((3,), 3.0))


def test_forcing_the_device_transport_across_processes_is_a_clear_error():
    outcomes = run_processes(_describe, env={"TORCH_TPU_DIST_TRANSPORT": "device"}, timeout=120,
                             expect_failure=True)
    for rank in (0, 1):
        status, message = outcomes[rank]
        assert status == "error"
        assert "TORCH_TPU_DIST_TRANSPORT=device cannot be used for this group" in message, message
        assert "different processes" in message and "Fix:" in message
