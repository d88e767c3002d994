"""Buffer donation: a program that writes its result over an input (in-place ops, optimizer
updates, the device transport's collectives) takes that input's buffer over instead of
allocating a new one - also while the program before it is still writing that buffer (queued,
or running). PJRT orders the two; a buffer another pending program still reads is never taken.
Counted in ``compilation_cache_stats()["donated_buffers"]``; every value is checked against the
CPU."""

import torch
import torch.distributed as dist

from dist_harness import run_threads
from torch_tpu.execution_mode import EagerMode, mode

N = 1 << 21  # 8 MB of float32: each op runs long enough for the next one to meet it in flight


def _donated():
    return torch.tpu.compilation_cache_stats()["donated_buffers"]


def test_back_to_back_in_place_ops_take_over_the_buffer_being_written():
    base = torch.randn(N)
    with mode(EagerMode.STRICT):
        x = base.to("tpu")
        x.mul_(1.0)
        torch.tpu.synchronize()
        before = _donated()
        for i in range(6):
            x.mul_(1.0 + i / 100).add_(0.5)
        torch.tpu.synchronize()
        donated = _donated() - before
    expected = base.clone()
    for i in range(6):
        expected.mul_(1.0 + i / 100).add_(0.5)
    assert donated == 12
    torch.testing.assert_close(x.cpu(), expected)


def test_a_buffer_a_pending_op_still_reads_is_not_taken():
    base = torch.randn(N)
    with mode(EagerMode.STRICT):
        x = base.to("tpu")
        reads = []
        for _ in range(4):
            reads.append(x * 2)  # queued reads of x ...
            x.add_(1)            # ... then x written in place
        results = [r.cpu() for r in reads]
    for i, r in enumerate(results):
        torch.testing.assert_close(r, (base + i) * 2)
    torch.testing.assert_close(x.cpu(), base + 4)


def _all_reduces(rank, world_size, rounds):
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(N, generator=g).to(torch.device("tpu", rank))
    dist.all_reduce(x)
    torch.tpu.synchronize()
    dist.barrier()
    before = _donated()
    for _ in range(rounds):
        dist.all_reduce(x)  # back to back: each launched while the one before still runs
    out = x.cpu()
    dist.barrier()
    return out, _donated() - before


def test_back_to_back_all_reduces_reuse_their_buffer():
    rounds = 5
    results = run_threads(_all_reduces, 2, args=(rounds,))
    inputs = [torch.randn(N, generator=torch.Generator().manual_seed(r)) for r in range(2)]
    expected = (inputs[0] + inputs[1]) * 2 ** rounds
    for out, donated in results:
        torch.testing.assert_close(out, expected)
        # Both ranks count into the one process's counter: every launch of either rank donated.
        assert donated == 2 * rounds
