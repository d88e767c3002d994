"""Kernels over a mesh of ranks: ``torch.tpu.pallas.get_pallas_mesh`` and
``jax_op(mesh=..., input_partition_specs=..., output_partition_specs=...)``.

The JAX function takes global arrays and does its work in one ``jax.shard_map`` over the mesh;
each rank's program runs the shard_map body with its JAX collectives (psum, all_gather,
ppermute, axis_index, psum_scatter, all_to_all) on tpu_dist's device transport (ranks as threads).
Every result is checked against the same math on the CPU over all ranks' inputs, in Strict mode,
in Fused Eager inside and outside ``spmd_safe`` (recorded into the graph or run as a program of
its own) and under torch.compile (in the compiled program, replayed)."""

import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
import torch.distributed as dist

from dist_harness import run_processes, run_threads

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from torch_tpu.kernels import KernelTraceError, jax_op  # noqa: E402

_ops = {}
_lock = threading.Lock()


def _op(key, make):
    """One custom op per test kernel for the whole process (the ranks' threads share it); made by
    the first rank to ask, once torch.distributed is up (get_pallas_mesh needs the world)."""
    with _lock:
        if key not in _ops:
            _ops[key] = make()
        return _ops[key]


def _exchange_op():
    mesh = torch.tpu.pallas.get_pallas_mesh("x")
    n = mesh.axis_sizes[0]

    def body(a, b):
        total = jax.lax.psum(a * 2, "x")
        gathered = jax.lax.all_gather(b, "x", tiled=True)
        shifted = jax.lax.ppermute(a, "x", [(i, (i + 1) % n) for i in range(n)])
        return total + shifted * jax.lax.axis_index("x").astype(a.dtype), gathered

    @jax_op("meshtest::exchange", mesh=mesh, input_partition_specs=(P("x"), P("x")),
            output_partition_specs=(P("x"), P()))
    def exchange(a, b):
        return jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=(P("x"), P()),
                             check_vma=False)(a, b)

    return exchange


def _inputs(rank, dtype):
    g = torch.Generator().manual_seed(5 + rank)
    if dtype.is_floating_point:
        return torch.randn(3, 4, generator=g).to(dtype), torch.randn(2, 5, generator=g).to(dtype)
    return (torch.randint(-9, 9, (3, 4), generator=g, dtype=dtype),
            torch.randint(-9, 9, (2, 5), generator=g, dtype=dtype))


def _expected(rank, world, dtype):
    ins = [_inputs(r, dtype) for r in range(world)]
    total = sum(a * 2 for a, _ in ins)
    shifted = ins[(rank - 1) % world][0]
    return total + shifted * rank, torch.cat([b for _, b in ins])


def _counts():
    from torch_tpu import _C

    return _C._dist_collective_counts(torch.tpu.current_device())


def _strict(rank, world, dtype):
    exchange = _op("exchange", _exchange_op)
    a, b = (t.to("tpu") for t in _inputs(rank, dtype))
    before = _counts()
    out, gathered = exchange(a, b)
    after = _counts()
    return out.cpu(), gathered.cpu(), after["launched"] - before["launched"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_collectives_in_the_kernel_equal_the_cpu(dtype):
    for rank, (out, gathered, launched) in enumerate(run_threads(_strict, args=(dtype,))):
        want, want_gathered = _expected(rank, 2, dtype)
        assert out.dtype == dtype and gathered.dtype == dtype
        assert out.shape == (3, 4) and gathered.shape == (4, 5)  # each rank's shard of the outputs
        tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
        torch.testing.assert_close(out, want, **tol)
        torch.testing.assert_close(gathered, want_gathered)
        assert launched == 1  # one program over the group, launched together


def _fused(rank, world):
    from torch.tpu.distributed import spmd_safe

    exchange = _op("exchange", _exchange_op)
    a, b = (t.to("tpu") for t in _inputs(rank, torch.float32))
    c0 = _counts()
    out, g = exchange(a + 1, b)  # outside spmd_safe: the graph ends, the kernel runs on its own
    outside = (out * 3).cpu(), g.cpu()
    c1 = _counts()
    stats0 = torch.tpu.compilation_cache_stats()
    with spmd_safe():
        out, g = exchange(a + 1, b)
        inside = (out * 3).cpu(), g.cpu()
    stats1 = torch.tpu.compilation_cache_stats()
    c2 = _counts()
    return (outside, inside, {k: c1[k] - c0[k] for k in c0}, {k: c2[k] - c1[k] for k in c0},
            stats1["graphs_with_collectives"] - stats0["graphs_with_collectives"])


def test_fused_records_the_kernel_inside_spmd_safe_and_cuts_outside():
    import torch_tpu

    with torch_tpu.execution_mode.mode("fused"):
        results = run_threads(_fused)
    ins = [_inputs(r, torch.float32) for r in range(2)]
    for rank, (outside, inside, c_out, c_in, graphs) in enumerate(results):
        total = sum((a + 1) * 2 for a, _ in ins)
        want = ((total + (ins[(rank - 1) % 2][0] + 1) * rank) * 3, torch.cat([b for _, b in ins]))
        for got in (outside, inside):
            torch.testing.assert_close(got[0], want[0])
            torch.testing.assert_close(got[1], want[1])
        assert c_out == {"launched": 1, "recorded": 0}, c_out
        assert c_in == {"launched": 0, "recorded": 1}, c_in  # in the graph with a + 1 and * 3
        assert graphs >= 1


def _compiled(rank, world):
    from torch_tpu.dynamo import graph_runner

    exchange = _op("exchange", _exchange_op)

    def step(a, b):
        out, g = exchange(torch.tanh(a), b * 2)
        return out.sum(0) + 1, g

    compiled = torch.compile(step, backend="tpu")
    results, counts = [], []
    for i in range(3):
        a, b = (t.to("tpu") + i for t in _inputs(rank, torch.float32))
        before = _counts()
        got = compiled(a, b)
        after = _counts()
        counts.append({k: after[k] - before[k] for k in after})
        results.append(tuple(t.cpu() for t in got))
    return results, counts, dict(graph_runner.stats)


def test_compiled_code_holds_the_kernel_and_replays():
    import torch._dynamo  # noqa: F401  (loaded before the ranks race to register the backend)

    results = run_threads(_compiled, timeout=180)
    for rank, (got, counts, _) in enumerate(results):
        for i, (total, gathered) in enumerate(got):
            ins = [tuple(t + i for t in _inputs(r, torch.float32)) for r in range(2)]
            out = sum(torch.tanh(a) * 2 for a, _ in ins) + torch.tanh(ins[(rank - 1) % 2][0]) * rank
            torch.testing.assert_close(total, out.sum(0) + 1, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(gathered, torch.cat([b * 2 for _, b in ins]))
        assert counts[0] == {"launched": 0, "recorded": 1}, counts  # the capture records it
        assert counts[1:] == [{"launched": 0, "recorded": 0}] * 2, counts  # replays: in the program


def _scatter_op():
    mesh = torch.tpu.pallas.get_pallas_mesh(("dp", "tp"), mesh_shape=(1, 2))

    def body(x):
        # psum_scatter over "tp": each rank gets its slice of the sum; all_to_all swaps row halves.
        part = jax.lax.psum_scatter(x, "tp", scatter_dimension=0, tiled=True)
        swapped = jax.lax.all_to_all(x, "tp", split_axis=0, concat_axis=0, tiled=True)
        return part, swapped

    @jax_op("meshtest::scatter", mesh=mesh, input_partition_specs=[P(None, ("dp", "tp"))])
    def scatter(x):
        return jax.shard_map(body, mesh=mesh, in_specs=P(None, ("dp", "tp")),
                             out_specs=(P(None, "tp"), P(None, "tp")), check_vma=False)(x)

    return scatter


def _scatter(rank, world):
    scatter = _op("scatter", _scatter_op)
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6) * (rank + 1)
    part, swapped = scatter(x.to("tpu"))
    return part.cpu(), swapped.cpu()


def test_a_two_axis_mesh_with_scatter_and_all_to_all():
    results = run_threads(_scatter)
    xs = [torch.arange(24, dtype=torch.float32).reshape(4, 6) * (r + 1) for r in range(2)]
    for rank, (part, swapped) in enumerate(results):
        torch.testing.assert_close(part, (xs[0] + xs[1])[2 * rank:2 * rank + 2])
        torch.testing.assert_close(swapped, torch.cat([xs[0][2 * rank:2 * rank + 2], xs[1][2 * rank:2 * rank + 2]]))


_FOUR_RANKS = textwrap.dedent("""
    import torch, jax, torch_tpu
    from jax.sharding import PartitionSpec as P
    from torch_tpu.distributed import run_in_threads
    from torch_tpu.kernels import jax_op
    ops = {}

    def rank_fn(rank, world):
        import threading
        with lock:
            if "op" not in ops:
                mesh = torch.tpu.pallas.get_pallas_mesh(("dp", "tp"), mesh_shape=(2, 2))

                def body(x):
                    return jax.lax.psum(x, "tp") * 10 + jax.lax.psum(x, "dp"), jax.lax.axis_index("dp")[None] * 1.0

                @jax_op("meshtest::grid", mesh=mesh, input_partition_specs=[P("dp", "tp")])
                def grid(x):
                    return jax.shard_map(body, mesh=mesh, in_specs=P("dp", "tp"),
                                         out_specs=(P("dp", "tp"), P(("dp", "tp"))), check_vma=False)(x)
                ops["op"] = grid
        out, dp = ops["op"](torch.full((2, 3), float(rank + 1), device="tpu"))
        return out.cpu(), dp.cpu()

    import threading
    lock = threading.Lock()
    for rank, (out, dp) in enumerate(run_in_threads(rank_fn, 4, timeout=120)):
        tp_sum = sum(r + 1 for r in range(4) if r // 2 == rank // 2)
        dp_sum = sum(r + 1 for r in range(4) if r % 2 == rank % 2)
        assert torch.equal(out, torch.full((2, 3), float(tp_sum * 10 + dp_sum))), (rank, out)
        assert dp.tolist() == [float(rank // 2)], (rank, dp)
    print("four ranks ok")
""")


def test_a_two_by_two_mesh_on_four_ranks():
    """Replica groups of one axis ([[0, 1], [2, 3]] for "tp") on four ranks (a fresh process: the
    suite's process has two devices)."""
    env = dict(os.environ, TORCH_TPU_CPU_DEVICE_COUNT="4", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    done = subprocess.run([sys.executable, "-c", _FOUR_RANKS], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "four ranks ok" in done.stdout


def _gather_with_backward():
    mesh = torch.tpu.pallas.get_pallas_mesh("x")

    @jax_op("meshtest::gather", mesh=mesh, input_partition_specs=[P("x")])
    def gather(x):
        return jax.shard_map(lambda v: jax.lax.all_gather(v, "x", tiled=True), mesh=mesh, in_specs=P("x"),
                             out_specs=P(), check_vma=False)(x)

    @jax_op("meshtest::gather_grad", mesh=mesh, input_partition_specs=[None])
    def gather_grad(g):
        # Every rank's loss reads the whole gathered array: a shard's gradient sums the ranks'
        # gradients over its rows.
        return jax.shard_map(lambda v: jax.lax.psum_scatter(v, "x", scatter_dimension=0, tiled=True),
                             mesh=mesh, in_specs=P(), out_specs=P("x"), check_vma=False)(g)

    gather.register_autograd(lambda ctx, grads: [gather_grad(grads[0])])
    return gather


def _trained(rank, world):
    gather = _op("gather", _gather_with_backward)
    x = (torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * rank).to("tpu").requires_grad_()
    weight = torch.linspace(-1, 1, 12).reshape(4, 3) * (rank + 1)
    loss = (gather(x) * weight.to("tpu")).sum()
    loss.backward()
    return loss.detach().cpu(), x.grad.cpu()


def test_a_registered_backward_runs_over_the_ranks():
    results = run_threads(_trained)
    xs = [torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * r for r in range(2)]
    weights = [torch.linspace(-1, 1, 12).reshape(4, 3) * (r + 1) for r in range(2)]
    for rank, (loss, grad) in enumerate(results):
        torch.testing.assert_close(loss, (torch.cat(xs) * weights[rank]).sum())
        torch.testing.assert_close(grad, sum(w for w in weights)[2 * rank:2 * rank + 2])


def _errors(rank, world):
    mesh = torch.tpu.pallas.get_pallas_mesh("x")
    found = {}
    for label, call in [
        ("shape", lambda: torch.tpu.pallas.get_pallas_mesh(("a", "b"), mesh_shape=(2, 2))),
        ("axes", lambda: torch.tpu.pallas.get_pallas_mesh(("a", "b"))),
        ("count", lambda: torch.tpu.pallas.get_pallas_mesh(("a", "b"), mesh_shape=(2,))),
    ]:
        with pytest.raises(ValueError) as e:
            call()
        found[label] = str(e.value)

    def make_outside():
        @jax_op("meshtest::outside", mesh=mesh, input_partition_specs=[P("x")])
        def outside(a):
            return jax.shard_map(lambda v: jax.lax.psum(v, "x"), mesh=mesh, in_specs=P("x"),
                                 out_specs=P("x"), check_vma=False)(a) + 1  # an op outside the shard_map
        return outside

    def make_wrong_specs():
        @jax_op("meshtest::wrong_specs", mesh=mesh, input_partition_specs=[P("x")],
                output_partition_specs=[P()])
        def wrong(a):
            return jax.shard_map(lambda v: v * 2, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(a)
        return wrong

    a = torch.ones(2, 3, device="tpu")
    with pytest.raises(KernelTraceError) as e:
        _op("outside", make_outside)(a)
    found["outside"] = str(e.value)
    with pytest.raises(KernelTraceError) as e:
        _op("wrong_specs", make_wrong_specs)(a)
    found["specs"] = str(e.value)
    exchange = _op("exchange", _exchange_op)
    with pytest.raises(RuntimeError) as e:
        exchange(a.clone().requires_grad_(), a)
    found["grad"] = str(e.value)
    with pytest.raises(RuntimeError) as e:
        exchange(torch.ones(2, 3), torch.ones(2, 3))
    found["cpu"] = str(e.value)
    return found


def test_clear_errors():
    for found in run_threads(_errors):
        assert "holds 4 positions but the world has 2 ranks" in found["shape"]
        assert "need a mesh_shape" in found["axes"]
        assert "one size per axis" in found["count"]
        assert "one jax.shard_map over every axis of the mesh" in found["outside"]
        assert "ops outside it" in found["outside"]
        assert "do not match the shard_map's out_specs" in found["specs"]
        assert "no automatic backward" in found["grad"] and "register_autograd" in found["grad"]
        assert "tpu devices" in found["cpu"]


def test_get_pallas_mesh_needs_torch_distributed():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="torch.distributed is not initialized"):
        torch.tpu.pallas.get_pallas_mesh("x")


def _on_host_transport(rank, world):
    from jax.sharding import AbstractMesh

    mesh = torch.tpu.pallas.get_pallas_mesh("x")
    assert isinstance(mesh, AbstractMesh) and mesh.axis_sizes == (2,)

    @jax_op("meshtest::host", mesh=mesh, input_partition_specs=[P("x")])
    def host(a):
        return jax.shard_map(lambda v: jax.lax.psum(v, "x"), mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                             check_vma=False)(a)

    try:
        host(torch.ones(2, device="tpu"))
    except RuntimeError as e:
        return str(e)
    return "no error"


def test_the_host_transport_is_a_clear_error():
    """Ranks in separate processes (the host transport) cannot run collectives inside programs on
    the CPU plugin: the kernel says so and how to run it."""
    for message in run_processes(_on_host_transport, timeout=240):
        assert "device transport" in message and "without mesh=" in message, message
