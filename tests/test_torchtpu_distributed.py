"""The original TorchTPU's distributed names on ours: torch.tpu.ops.all_gather_dim /
reduce_scatter_dim / send / recv / ragged_all_to_all, torch.tpu.distributed.spmd_safe, topology_aware_mesh and
set_tpu_launch_env. Collectives run on 2 ranks as threads (the device transport) and as processes
(the host transport); every result is compared with the same math on CPU tensors."""

import os

import pytest
import torch

from dist_harness import run_processes, run_threads
from torch_tpu.distributed.topology import layout_from_devices


def _data(rank, shape=(4, 6)):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(shape, generator=g)


# Per rank: (rows sent to each rank, where they start in the operand, where each receiver puts them).
_RAGGED = {0: ([2, 3], [0, 2], [1, 0]), 1: ([1, 4], [5, 0], [4, 3])}


def _weights(rank):
    return torch.arange(24, dtype=torch.float32).reshape(8, 3) + 100 * rank


def _ragged_expected(world_size):
    operands = [_data(r, (6, 3)) + 10 * r for r in range(world_size)]
    outputs = [torch.full((8, 3), -1.0) for _ in range(world_size)]
    grads = [torch.zeros(6, 3) for _ in range(world_size)]
    for src in range(world_size):
        sends, starts, targets = _RAGGED[src]
        for dst in range(world_size):
            n, s, t = sends[dst], starts[dst], targets[dst]
            outputs[dst][t:t + n] = operands[src][s:s + n]
            grads[src][s:s + n] = _weights(dst)[t:t + n]
    return outputs, grads


def collective_cases(rank, world_size):
    import torch.distributed as dist

    ops = torch.tpu.ops
    out = {}
    x = _data(rank).to("tpu")
    out["gather0"] = ops.all_gather_dim(x, 0).cpu()
    out["gather1"] = ops.all_gather_dim(x, -1).cpu()
    out["rs_sum1"] = ops.reduce_scatter_dim(x, 1).cpu()
    out["rs_max0"] = ops.reduce_scatter_dim(x, 0, reduce_op="max").cpu()
    ints = (torch.arange(8).reshape(2, 4) * (rank + 3)).to("tpu")
    out["rs_bxor1"] = ops.reduce_scatter_dim(ints, 1, reduce_op="bxor").cpu()
    # send / recv of two tensors, rank 0 -> rank 1, matched by tag.
    if rank == 0:
        ops.send([x * 2, ints], 1, 7).wait()
    else:
        a, b = torch.empty(4, 6, device="tpu"), torch.empty(2, 4, dtype=torch.int64, device="tpu")
        work = ops.recv([a, b], 0, 7)
        work.wait()
        out["recv_a"], out["recv_b"] = a.cpu(), b.cpu()
    errors = {}
    for name, call in (("rs_uneven", lambda: ops.reduce_scatter_dim(torch.ones(3, 2, device="tpu"), 0)),
                       ("rs_op", lambda: ops.reduce_scatter_dim(x, 0, reduce_op="mean")),
                       ("bitwise_float", lambda: ops.reduce_scatter_dim(x, 0, reduce_op="band"))):
        try:
            call()
        except (ValueError, TypeError) as e:
            errors[name] = str(e)
    out["errors"] = errors

    # spmd_safe as a decorator and as a context manager: the region's results are right.
    from torch_tpu.distributed.spmd import in_spmd_safe_region

    @torch.tpu.distributed.spmd_safe
    def scaled_all_reduce(t):
        assert in_spmd_safe_region()
        y = t * 5
        dist.all_reduce(y)
        return y + 1

    out["spmd_decorated"] = scaled_all_reduce(x).cpu()
    with torch.tpu.distributed.spmd_safe():
        z = x.sin()
        dist.all_reduce(z, op=dist.ReduceOp.MAX)
    out["spmd_block"] = z.cpu()
    out["outside"] = in_spmd_safe_region()
    # ragged_all_to_all (2 ranks): uneven slices, out of order, placed where the senders say.
    operand = (_data(rank, (6, 3)) + 10 * rank).to("tpu").requires_grad_()
    sends, starts, targets = _RAGGED[rank]
    recvs = [_RAGGED[j][0][rank] for j in range(world_size)]
    exchanged = torch.tpu.ops.ragged_all_to_all(
        operand, torch.full((8, 3), -1.0, device="tpu"), torch.tensor(starts, device="tpu"),
        torch.tensor(sends, device="tpu"), torch.tensor(targets, device="tpu"), torch.tensor(recvs, device="tpu"),
        dist.group.WORLD.group_name)
    (exchanged * _weights(rank).to("tpu")).sum().backward()
    out["ragged"], out["ragged_grad"] = exchanged.detach().cpu(), operand.grad.cpu()
    out["mesh"] = torch.tpu.distributed.topology_aware_mesh("tpu", (world_size,))
    out["mesh_2d"] = torch.tpu.topology_aware_mesh("tpu", (1, world_size))
    return out


def _check(results, world_size=2):
    xs = [_data(r) for r in range(world_size)]
    total = sum(xs)
    ints = [torch.arange(8).reshape(2, 4) * (r + 3) for r in range(world_size)]
    for rank, out in enumerate(results):
        torch.testing.assert_close(out["gather0"], torch.cat(xs, 0))
        torch.testing.assert_close(out["gather1"], torch.cat(xs, 1))
        torch.testing.assert_close(out["rs_sum1"], total.chunk(world_size, 1)[rank])
        torch.testing.assert_close(out["rs_max0"], torch.stack(xs).amax(0).chunk(world_size, 0)[rank])
        torch.testing.assert_close(out["rs_bxor1"], (ints[0] ^ ints[1]).chunk(world_size, 1)[rank])
        assert set(out["errors"]) == {"rs_uneven", "rs_op", "bitwise_float"}, out["errors"]
        assert "divisible" in out["errors"]["rs_uneven"]
        torch.testing.assert_close(out["spmd_decorated"], total * 5 + 1)
        torch.testing.assert_close(out["spmd_block"], torch.stack([x.sin() for x in xs]).amax(0))
        assert out["outside"] is False
        assert out["mesh"].tolist() == list(range(world_size))
        assert out["mesh_2d"].tolist() == [list(range(world_size))]
    outputs, grads = _ragged_expected(world_size)
    for rank, out in enumerate(results):
        torch.testing.assert_close(out["ragged"], outputs[rank])
        torch.testing.assert_close(out["ragged_grad"], grads[rank])
    torch.testing.assert_close(results[1]["recv_a"], xs[0] * 2)
    torch.testing.assert_close(results[1]["recv_b"], ints[0])


def test_device_transport():
    _check(run_threads(collective_cases, timeout=180))


def test_host_transport():
    _check(run_processes(collective_cases, timeout=240))


def test_collectives_need_a_process_group():
    with pytest.raises(RuntimeError, match="init_process_group"):
        torch.tpu.ops.all_gather_dim(torch.ones(2, device="tpu"), 0)
    with pytest.raises(RuntimeError, match="init_process_group"):
        torch.tpu.distributed.topology_aware_mesh("tpu", (1,))


def _devices(spec):
    """Per rank: (slice, coords, core, id)."""
    return [{"slice": s, "coords": c, "core": k, "id": i} for s, c, k, i in spec]


def test_layout_follows_device_ids_without_coordinates():
    devices = _devices([(None, (), 0, i) for i in (3, 1, 0, 2)])  # rank r owns device id ...
    assert layout_from_devices((2, 2), devices).tolist() == [[2, 1], [3, 0]]


def test_layout_follows_physical_coordinates():
    # ranks 0..3 on chips at (x, y) = (1,0), (0,0), (1,1), (0,1); coords are outermost-first here
    coords = [(0, 1), (0, 0), (1, 1), (1, 0)]
    devices = _devices([(None, c, 0, 10 + r) for r, c in enumerate(coords)])
    assert layout_from_devices((4,), devices).tolist() == [1, 0, 3, 2]


def test_layout_of_a_2x2x1_slice_with_two_cores_per_chip():
    # 8 ranks: chips at (z, y, x) with z = 0, two cores each; ranks handed out in a scrambled order
    spec = [(c, k) for c in [(0, 1, 1), (0, 0, 0), (0, 1, 0), (0, 0, 1)] for k in (1, 0)]
    devices = _devices([(None, c, k, 100 + r) for r, (c, k) in enumerate(spec)])
    layout = layout_from_devices((4, 2), devices)
    for (row, col), rank in zip([(i, j) for i in range(4) for j in range(2)], layout.reshape(-1).tolist()):
        c, k = spec[rank]
        # rows walk the chips in (y, x) order; the innermost axis joins the two cores of one chip
        assert (c[1] * 2 + c[2], k) == (row, col)


def test_layout_of_a_4x4x4_slice():
    g = torch.Generator().manual_seed(3)
    order = torch.randperm(64, generator=g).tolist()  # rank r sits on the chip numbered order[r]
    coords = [(n // 16, (n // 4) % 4, n % 4) for n in order]
    devices = _devices([(None, c, 0, r) for r, c in enumerate(coords)])
    cube = layout_from_devices((4, 4, 4), devices)
    for i in range(4):
        for j in range(4):
            for k in range(4):
                assert coords[cube[i, j, k]] == (i, j, k)
    # A 16 x 4 mesh: its inner axis is a line of 4 physical neighbours.
    flat = layout_from_devices((16, 4), devices)
    for a in range(16):
        assert [coords[r] for r in flat[a].tolist()] == [(a // 4, a % 4, k) for k in range(4)]


def test_layout_splits_one_axis_across_slices():
    # 8 ranks in 2 slices (ranks 0-3 in slice 1, 4-7 in slice 0), 4 devices each.
    spec = [(1, (), 0, 100 + r) for r in range(4)] + [(0, (), 0, r) for r in range(4)]
    devices = _devices(spec)
    inferred = layout_from_devices((2, 4), devices)
    assert inferred.tolist() == [[4, 5, 6, 7], [0, 1, 2, 3]]  # the first axis crosses slices
    explicit = layout_from_devices((4, 2), devices, dcn_mesh_shape=(2, 1))
    assert explicit.tolist() == [[4, 5], [6, 7], [0, 1], [2, 3]]
    on_last = layout_from_devices((2, 4), devices, dcn_mesh_shape=(1, 2))
    assert on_last.tolist() == [[4, 5, 0, 1], [6, 7, 2, 3]]
    with pytest.raises(ValueError, match="multiplies to 1"):
        layout_from_devices((2, 4), devices, dcn_mesh_shape=(1, 1))
    with pytest.raises(ValueError, match="divide"):
        layout_from_devices((8, 1), devices, dcn_mesh_shape=(1, 2))
    with pytest.raises(ValueError, match="8 positions"):
        layout_from_devices((2, 4), devices[:6])


def test_layout_rejects_inconsistent_devices():
    with pytest.raises(RuntimeError, match="only some ranks"):
        layout_from_devices((2,), _devices([(0, (), 0, 0), (None, (), 0, 1)]))
    with pytest.raises(RuntimeError, match="share PJRT devices"):
        layout_from_devices((2,), _devices([(None, (), 0, 0), (None, (), 0, 0)]))


_LAUNCH_VARS = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE", "TPU_WORKER_HOSTNAMES",
                "JOB_COMPLETION_INDEX", "TORCH_TPU_DEVICES_PER_HOST")


@pytest.fixture
def launch_env(monkeypatch):
    for name in _LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv("PET_" + name, raising=False)
    return monkeypatch


def test_launch_env_single_host(launch_env):
    launch_env.setenv("TORCH_TPU_CPU_DEVICE_COUNT", "2")
    torch.tpu.distributed.set_tpu_launch_env()
    assert os.environ["MASTER_ADDR"] == "127.0.0.1" and os.environ["PET_MASTER_ADDR"] == "127.0.0.1"
    assert 0 < int(os.environ["MASTER_PORT"]) < 65536
    assert os.environ["NNODES"] == "1" and os.environ["NODE_RANK"] == "0"
    assert os.environ["PET_NPROC_PER_NODE"] == str(torch.tpu.device_count())
    port = os.environ["MASTER_PORT"]
    torch.tpu.distributed.set_tpu_launch_env(nproc_per_node=1)  # never overwrites
    assert os.environ["MASTER_PORT"] == port and os.environ["NPROC_PER_NODE"] == str(torch.tpu.device_count())


def test_launch_env_multi_host(launch_env):
    launch_env.setenv("TPU_WORKER_HOSTNAMES", "10.0.0.5,10.0.0.6")
    launch_env.setenv("JOB_COMPLETION_INDEX", "1")
    launch_env.setenv("TORCH_TPU_DEVICES_PER_HOST", "4")
    torch.tpu.distributed.set_tpu_launch_env()
    assert os.environ["PET_NNODES"] == "2" and os.environ["PET_NODE_RANK"] == "1"
    assert os.environ["MASTER_ADDR"] == "10.0.0.5" and os.environ["MASTER_PORT"] == "29500"
    assert os.environ["NPROC_PER_NODE"] == "4"


def test_launch_env_errors(launch_env):
    launch_env.setenv("TPU_WORKER_HOSTNAMES", "a,b")
    with pytest.raises(ValueError, match="TPU_WORKER_HOSTNAMES lists 2"):
        torch.tpu.distributed.set_tpu_launch_env(nnodes=3)
    with pytest.raises(ValueError, match="NODE_RANK"):
        torch.tpu.distributed.set_tpu_launch_env()
    assert "MASTER_ADDR" not in os.environ  # nothing set when it fails


@pytest.mark.parametrize("name", ["window_num_stripes", "window_stripe_chunk_mb"])
def test_window_knobs_read_and_write_validated_values(name):
    """The original's WindowTpu DMA knobs: settable properties of torch.tpu.distributed (no such
    transport here, so they change nothing), refusing what the original refuses."""
    module = torch.tpu.distributed
    before = getattr(module, name)
    assert isinstance(before, int) and before >= 1
    try:
        setattr(module, name, 6)
        assert getattr(module, name) == 6
        for bad in (0, -2, 1.5, True, "4"):
            with pytest.raises(ValueError, match=f"{name} must be a positive int"):
                setattr(module, name, bad)
        assert getattr(module, name) == 6
    finally:
        setattr(module, name, before)


def test_spmd_safe_runs_its_region_while_another_thread_compiles():
    """torch.compiler.is_compiling() is one process-wide flag: while another thread (another rank,
    when ranks are threads) compiles, a region entered on this thread must still be a region -
    not an FX annotation, which left this rank's collectives eager while the others recorded
    theirs, and the ranks' collectives diverged."""
    import threading

    from torch_tpu.distributed.spmd import in_spmd_safe_region

    compiling, release = threading.Event(), threading.Event()

    def other_rank_compiles():
        with torch.compiler._compile_session_context():  # what Dynamo holds while it compiles
            compiling.set()
            release.wait(30)

    other = threading.Thread(target=other_rank_compiles)
    other.start()
    try:
        assert compiling.wait(30) and torch.compiler.is_compiling()
        with torch.tpu.distributed.spmd_safe():
            inside = in_spmd_safe_region()
        assert inside
        assert not in_spmd_safe_region()
    finally:
        release.set()
        other.join()
