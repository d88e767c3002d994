"""Freeing a storage (`untyped_storage().resize_(0)`, as FSDP2 frees its unsharded parameters after
each use) while a Fused Eager graph writes or reads it: the graph is not run for it - it forgets
the storage and keeps computing what its recorded ops need - and every result equals the CPU's."""

import torch
import torch_tpu

from helpers import assert_close


def graphs_run():
    return torch.tpu.compilation_cache_stats()["fused_graphs_run"]


def test_freeing_a_storage_the_graph_writes_does_not_run_the_graph():
    src = torch.randn(16, 8)
    w = torch.randn(8, 4)
    with torch_tpu.execution_mode.mode("fused"):
        p = torch.empty(16, 8, device="tpu")
        wt, st = w.to("tpu"), src.to("tpu")
        torch.tpu.synchronize()
        before = graphs_run()
        p.copy_(st * 2)  # the graph writes p's storage...
        y = p @ wt  # ...and reads it
        p.untyped_storage().resize_(0)  # freed: nothing reads the old contents any more
        assert graphs_run() == before
        assert p.untyped_storage().nbytes() == 0
        assert_close(y, (src * 2) @ w)
        assert graphs_run() == before + 1


def test_an_fsdp_style_cycle_is_not_cut_by_its_frees_and_matches_the_cpu():
    # Per unit: re-allocate the unsharded storage, write the gathered values into it, compute
    # with it, free it - three times, the way FSDP2 runs its units' forward.
    ws = [torch.randn(8, 8) for _ in range(3)]
    x = torch.randn(4, 8)
    want = x
    for w in ws:
        want = torch.tanh(want @ (w * 0.5))
    with torch_tpu.execution_mode.mode("fused"):
        shards = [w.to("tpu") for w in ws]
        p = torch.empty(8, 8, device="tpu")
        storage = p.untyped_storage()
        nbytes = storage.nbytes()
        storage.resize_(0)
        h = x.to("tpu")
        for shard in shards:
            storage.resize_(nbytes)
            p.copy_(shard * 0.5)  # computed inside the graph, as FSDP2's copy-out of an all-gather
            h = torch.tanh(h @ p)
            before = graphs_run()
            storage.resize_(0)
            assert graphs_run() == before  # the free did not cut the graph
        assert_close(h, want)


def test_freeing_a_storage_the_graph_only_reads():
    x = torch.randn(32)
    with torch_tpu.execution_mode.mode("fused"):
        t = x.to("tpu")
        torch.tpu.synchronize()
        y = t * 3 + 1  # recorded: the graph binds t's buffer
        t.untyped_storage().resize_(0)
        assert_close(y, x * 3 + 1)


def test_strict_mode_frees_and_regrows_with_the_right_values():
    x = torch.randn(6)
    t = x.to("tpu")
    y = t * 2
    t.untyped_storage().resize_(0)
    assert_close(y, x * 2)
    t.untyped_storage().resize_(6 * 4)
    t.fill_(5.0)
    assert_close(t, torch.full((6,), 5.0))
