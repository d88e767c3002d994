"""Collectives inside recorded graphs. In Fused Eager a collective ends the pending graph and runs
as its own program, so the graphs around it are cut at the same points on every rank and replay
from the cache after the first step; under torch.compile(backend="tpu") a function calling a
collective (traced by Dynamo as a functional collective) gives the eager result."""

import torch
import torch.distributed as dist

from dist_harness import run_processes

STEPS = 6


def _step(x, w, rank):
    h = torch.tanh(x @ w) * (rank + 1)
    dist.all_reduce(h)  # the graph is cut here
    return (h * h).sum(dim=1)


def fused_loop(rank, world_size):
    import torch_tpu

    torch_tpu.execution_mode.set_mode("fused")
    g = torch.Generator().manual_seed(7)
    w = torch.randn(8, 8, generator=g).to("tpu")
    outs, compiles = [], []
    for step in range(STEPS):
        x = torch.randn(4, 8, generator=g).to("tpu")
        outs.append(_step(x, w, rank).cpu())
        compiles.append(torch.tpu.compilation_cache_stats()["fused_graph_compiles"])
    torch_tpu.execution_mode.set_mode("strict")
    return outs, compiles


def test_fused_eager_collective_cuts_the_graph_and_replays():
    g = torch.Generator().manual_seed(7)
    w = torch.randn(8, 8, generator=g)
    expected = []
    for _ in range(STEPS):
        x = torch.randn(4, 8, generator=g)
        h = sum(torch.tanh(x @ w) * (r + 1) for r in range(2))
        expected.append((h * h).sum(dim=1))
    for rank, (outs, compiles) in enumerate(run_processes(fused_loop, timeout=180)):
        for step, (got, want) in enumerate(zip(outs, expected)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m: f"rank {rank} step {step}: {m}")
        assert compiles[-1] > 0, compiles
        # After the first two steps every graph is known: nothing compiles any more.
        assert compiles[2:] == [compiles[2]] * (STEPS - 2), compiles


def compiled_collective(rank, world_size):
    import warnings

    import torch._dynamo

    def fn(x):
        y = x * 2
        dist.all_reduce(y)
        return y + 1

    compiled = torch.compile(fn, backend="tpu")
    results = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + rank + i
            results.append((compiled(x.to("tpu")).cpu(), fn(x.to("tpu")).cpu()))
    return results, [str(w.message) for w in caught if "recorded again" in str(w.message)]


def test_compiled_function_with_a_collective_gives_the_eager_result():
    for rank, (results, notes) in enumerate(run_processes(compiled_collective, timeout=180)):
        # Two processes talk over the host transport: the warning says so (not "an op read device
        # data on the host", which would send the user looking for CPU fallbacks).
        assert len(notes) == 1 and "(all_reduce) ran over the host transport" in notes[0], notes
        for i, (compiled, eager) in enumerate(results):
            x0 = torch.arange(6, dtype=torch.float32).reshape(2, 3) + i
            want = 2 * x0 + 2 * (x0 + 1) + 1  # ranks 0 and 1
            torch.testing.assert_close(eager, want)
            torch.testing.assert_close(compiled, want, msg=lambda m: f"rank {rank} call {i}: {m}")
