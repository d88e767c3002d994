"""tpu_dist collectives: every collective and reduce op, for float32, bfloat16 and int64,
contiguous and non-contiguous, async, in subgroups - on both transports, each compared with
the same collectives on CPU tensors with Gloo (and the two transports with each other)."""

import os

import pytest
import torch
import torch.distributed as dist

from dist_harness import run_processes, run_threads

DTYPES = (torch.float32, torch.bfloat16, torch.int64)


def _ops(dtype):
    R = dist.ReduceOp
    if dtype.is_floating_point:
        return {"sum": R.SUM, "max": R.MAX, "min": R.MIN, "product": R.PRODUCT, "avg": R.AVG,
                "premul": dist._make_nccl_premul_sum(0.5)}
    return {"sum": R.SUM, "max": R.MAX, "min": R.MIN, "product": R.PRODUCT, "band": R.BAND,
            "bor": R.BOR, "bxor": R.BXOR}


def _all_reduce(t, name, op, on_cpu, n):
    """all_reduce; on CPU, Gloo has no PREMUL_SUM (and older Gloo no AVG): the reference
    computes them from SUM."""
    if on_cpu and name == "premul":
        t.mul_(0.5)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    elif on_cpu and name == "avg":
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t.div_(n)
    else:
        dist.all_reduce(t, op=op)


def collective_cases(rank, n, device):
    """Runs every collective on `device` ('cpu' with Gloo, or 'tpu') and returns the results as
    CPU tensors keyed by case."""
    on_cpu = device == "cpu"
    gen = torch.Generator().manual_seed(100 + rank)

    def data(shape, dtype):
        if dtype.is_floating_point:
            t = torch.randn(shape, generator=gen).to(dtype)
        else:
            t = torch.randint(-9, 10, shape, generator=gen, dtype=dtype)
        return t.to(device)

    def views(dtype):
        """(name, tensor) pairs: a contiguous tensor and a transposed view of one."""
        base = data((8, 6), dtype)
        return [("contig", data((6, 8), dtype)), ("noncontig", base.t())]

    out = {}
    for dtype in DTYPES:
        d = str(dtype).split(".")[1]
        for layout, x in views(dtype):
            key = f"{d}/{layout}"
            for name, op in _ops(dtype).items():
                y = x.clone() if layout == "contig" else data((8, 6), dtype).t()
                _all_reduce(y, name, op, on_cpu, n)
                out[f"all_reduce/{name}/{key}"] = y.cpu()
            y = x.clone() if layout == "contig" else data((8, 6), dtype).t()
            dist.broadcast(y, src=1)
            out[f"broadcast/{key}"] = y.cpu()
            y = x.clone() if layout == "contig" else data((8, 6), dtype).t()
            dist.reduce(y, dst=0, op=dist.ReduceOp.SUM)
            if rank == 0:
                out[f"reduce/{key}"] = y.cpu()
            outs = [torch.empty_like(x) for _ in range(n)]
            dist.all_gather(outs, x)
            out[f"all_gather/{key}"] = torch.stack([o.cpu() for o in outs])
            big = torch.empty((n * x.shape[0], x.shape[1]), dtype=dtype, device=device)
            dist.all_gather_into_tensor(big, x.contiguous())
            out[f"all_gather_into_tensor/{key}"] = big.cpu()
            pieces = [data((3, 4), dtype) for _ in range(n)]
            got = torch.empty((3, 4), dtype=dtype, device=device)
            dist.reduce_scatter(got, pieces, op=dist.ReduceOp.SUM)
            out[f"reduce_scatter/{key}"] = got.cpu()
            got = torch.empty((x.shape[0] // n, x.shape[1]), dtype=dtype, device=device)
            dist.reduce_scatter_tensor(got, x.contiguous(), op=dist.ReduceOp.MAX)
            out[f"reduce_scatter_tensor/max/{key}"] = got.cpu()
            # all_to_all_single: even, then uneven splits (rank r sends r + 1 + j rows to rank j).
            got = torch.empty_like(x, memory_format=torch.contiguous_format)
            dist.all_to_all_single(got, x.contiguous())  # c10d takes contiguous tensors only
            out[f"all_to_all_single/{key}"] = got.cpu()
            in_splits = [rank + 1 + j for j in range(n)]
            out_splits = [r + 1 + rank for r in range(n)]
            src = data((sum(in_splits), 5), dtype)
            got = torch.empty((sum(out_splits), 5), dtype=dtype, device=device)
            dist.all_to_all_single(got, src, out_splits, in_splits)
            out[f"all_to_all_single/uneven/{key}"] = got.cpu()
            ins = [data((j + 1, 2), dtype) for j in range(n)]
            outs = [torch.empty((rank + 1, 2), dtype=dtype, device=device) for _ in range(n)]
            if on_cpu:
                # Gloo's list all_to_all takes equal sizes only: the reference goes flat.
                flat_out = torch.empty(2 * n * (rank + 1), dtype=dtype)
                dist.all_to_all_single(flat_out, torch.cat([i.reshape(-1) for i in ins]),
                                       [2 * (rank + 1)] * n, [i.numel() for i in ins])
                outs = list(flat_out.view(n, rank + 1, 2))
            else:
                dist.all_to_all(outs, ins)
            out[f"all_to_all/{key}"] = torch.cat([o.cpu() for o in outs])
            got = torch.empty((4,), dtype=dtype, device=device)
            dist.scatter(got, [data((4,), dtype) for _ in range(n)] if rank == 0 else None, src=0)
            out[f"scatter/{key}"] = got.cpu()
            gathered = [torch.empty_like(x) for _ in range(n)] if rank == 1 else None
            dist.gather(x, gathered, dst=1)
            if rank == 1:
                out[f"gather/{key}"] = torch.stack([g.cpu() for g in gathered])
            if rank == 0:
                dist.send(x.contiguous() * 2, dst=1)
            else:
                got = torch.empty_like(x, memory_format=torch.contiguous_format)
                dist.recv(got, src=0)
                out[f"send_recv/{key}"] = got.cpu()

    # A large tensor (over 16 MB: the device transport reduce-scatters, then all-gathers).
    big = data(((17 << 20) // 4,), torch.float32)
    for name in ("sum", "avg"):
        y = big.clone()
        _all_reduce(y, name, _ops(torch.float32)[name], on_cpu, n)
        out[f"all_reduce/large/{name}"] = y.cpu()

    # async_op: the work's wait() and its future yield the written outputs.
    y = data((5,), torch.float32)
    work = dist.all_reduce(y, async_op=True)
    work.wait()
    out["async/all_reduce"] = y.cpu()
    fut_value = work.get_future().wait()
    out["async/future"] = fut_value[0].cpu()
    big = torch.empty((2 * n, 3), device=device)
    work = dist.all_gather_into_tensor(big, data((2, 3), torch.float32), async_op=True)
    work.wait()
    out["async/all_gather_into_tensor"] = big.cpu()

    # Subgroups: every rank alone, and the world again with its ranks in reverse order.
    alone = [dist.new_group([r]) for r in range(n)]
    y = data((4,), torch.float32)
    dist.all_reduce(y, group=alone[rank])
    out["subgroup/alone"] = y.cpu()
    reverse = dist.new_group(list(reversed(range(n))))
    y = data((4,), torch.float32)
    dist.all_reduce(y, group=reverse, op=dist.ReduceOp.MAX)
    out["subgroup/reverse/all_reduce"] = y.cpu()
    y = data((4,), torch.float32)
    dist.broadcast(y, src=n - 1, group=reverse)
    out["subgroup/reverse/broadcast"] = y.cpu()

    # batch_isend_irecv: every rank sends to the next and receives from the previous.
    send_t = data((3,), torch.float32)
    recv_t = torch.empty((3,), device=device)
    ops = [dist.P2POp(dist.irecv, recv_t, (rank - 1) % n), dist.P2POp(dist.isend, send_t, (rank + 1) % n)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    out["batch_isend_irecv"] = recv_t.cpu()

    # Object collectives still run (on the CPU side of the group).
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank, "square": rank * rank})
    out["all_gather_object"] = torch.tensor([o["square"] for o in objs])
    lst = [rank * 10, "x"] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    out["broadcast_object_list"] = torch.tensor([lst[0]])
    dist.barrier()
    return out


def _tpu_cases(rank, n):
    from torch_tpu.distributed import transport_of

    return transport_of(), collective_cases(rank, n, "tpu")


@pytest.fixture(scope="module")
def gloo_reference():
    return run_processes(collective_cases, backend="gloo", args=("cpu",), timeout=180)


@pytest.fixture(scope="module")
def host_results():
    return run_processes(_tpu_cases, backend="tpu_dist", timeout=240)


@pytest.fixture(scope="module")
def device_results():
    return run_threads(_tpu_cases, timeout=240)


@pytest.fixture(scope="module")
def device_store_results():
    """The device transport with its ranks meeting through the store, as ranks in different
    processes do on plugins whose collectives span processes."""
    os.environ["TORCH_TPU_DIST_RENDEZVOUS"] = "store"
    try:
        return run_threads(_tpu_cases, timeout=240)
    finally:
        del os.environ["TORCH_TPU_DIST_RENDEZVOUS"]


def _compare(results, reference, transport):
    for rank, (used, cases) in enumerate(results):
        assert used == transport, f"rank {rank} used the {used} transport"
        assert cases.keys() == reference[rank].keys(), set(cases) ^ set(reference[rank])
        for key, expected in reference[rank].items():
            torch.testing.assert_close(cases[key], expected, msg=lambda m: f"rank {rank} {key}: {m}")


def test_host_transport_equals_gloo_on_cpu(host_results, gloo_reference):
    _compare(host_results, gloo_reference, "host")


def test_device_transport_equals_gloo_on_cpu(device_results, gloo_reference):
    _compare(device_results, gloo_reference, "device")


def test_device_transport_meeting_through_the_store_equals_gloo_on_cpu(device_store_results, gloo_reference):
    _compare(device_store_results, gloo_reference, "device")


def test_both_transports_give_identical_results(host_results, device_results):
    for rank in range(len(host_results)):
        host, device = host_results[rank][1], device_results[rank][1]
        for key in host:
            assert torch.equal(host[key], device[key]), f"rank {rank} {key}: {host[key]} vs {device[key]}"
