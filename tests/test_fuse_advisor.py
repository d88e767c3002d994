"""Fused Eager finds out by itself when a loop runs faster op by op (exec/fuse_advisor.h): it times
windows of whole iterations fused and strict, and runs the pattern strictly when Strict wins by
the margin. The verdict is forced here through the margin (a timing race would be flaky); the
logic on a synthetic clock is tests/cpp/test_fuse_advisor.cc, the speed the zoo's."""

import pytest
import torch

from torch_tpu import _C
from torch_tpu.execution_mode import EagerMode, mode

QUICK = dict(min_window_seconds=0.0, strict_iterations=5, max_iteration_seconds=10.0)


@pytest.fixture
def advisor():
    def configure(**settings):
        _C._configure_fuse_advisor(**{**QUICK, **settings})

    yield configure
    _C._configure_fuse_advisor()  # the defaults, and every graph's advisor afresh


def _stats():
    s = torch.tpu.compilation_cache_stats()
    return {k: s[k] for k in ("fused_patterns_timed", "fused_patterns_strict", "fused_ops_run_strictly",
                              "fused_graph_replays")}


def _train(device, steps, params, batches, read_every=1):
    """A small MLP training loop (LayerNorm, AdamW); the loss read every `read_every` steps."""
    w1, w2 = (p.detach().clone().to(device).requires_grad_() for p in params)
    norm = torch.nn.LayerNorm(32).to(device)
    opt = torch.optim.AdamW([w1, w2, *norm.parameters()], lr=1e-2)
    losses = []
    for i in range(steps):
        x, y = (t.to(device) for t in batches[i % len(batches)])
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(norm(torch.relu(x @ w1)) @ w2, y)
        loss.backward()
        opt.step()
        if (i + 1) % read_every == 0:
            losses.append(loss.item())
    return losses, [w1.detach().cpu(), w2.detach().cpu()]


def _case(seed=0):
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(16, 32, generator=g) * 0.3, torch.randn(32, 4, generator=g) * 0.3]
    batches = [(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)) for _ in range(3)]
    return params, batches


@pytest.mark.parametrize("read_every", [1, 3])
def test_a_loop_judged_faster_op_by_op_runs_strictly_and_computes_the_same(advisor, read_every):
    advisor(margin=-100.0)  # Strict "wins" whatever the times: the verdict is strict
    params, batches = _case()
    expected = _train("cpu", 90, params, batches, read_every)
    before = _stats()
    with mode(EagerMode.FUSED):
        got = _train("tpu", 90, params, batches, read_every)
    after = _stats()
    torch.testing.assert_close(torch.tensor(got[0]), torch.tensor(expected[0]), rtol=1e-4, atol=1e-5)
    for g, e in zip(got[1], expected[1]):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    assert after["fused_patterns_strict"] - before["fused_patterns_strict"] >= 1, after
    # Most of the loop ran op by op once judged: stretches of 5 iterations, one recorded between.
    assert after["fused_ops_run_strictly"] - before["fused_ops_run_strictly"] > 30 * 20, after


def test_a_loop_faster_fused_stays_fused(advisor):
    advisor(margin=0.99)  # Strict would have to be 100x faster: the verdict is fuse
    params, batches = _case(1)
    with mode(EagerMode.FUSED):
        _train("tpu", 40, params, batches)
        judged = _stats()
        _train("tpu", 20, params, batches)
    after = _stats()
    assert judged["fused_patterns_timed"] >= 1 and judged["fused_patterns_strict"] == 0, judged
    assert after["fused_ops_run_strictly"] == judged["fused_ops_run_strictly"]  # trials are over
    assert after["fused_graph_replays"] >= judged["fused_graph_replays"] + 20


def test_off_by_environment(advisor, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FUSE_ADVISOR", "0")
    advisor(margin=-100.0)
    params, batches = _case(2)
    before = _stats()
    with mode(EagerMode.FUSED):
        _train("tpu", 40, params, batches)
    after = _stats()
    assert after["fused_ops_run_strictly"] == before["fused_ops_run_strictly"]
    assert after["fused_patterns_timed"] == 0


def test_captures_inside_a_strict_loop_are_still_whole_programs(advisor, fresh_dynamo):
    # torch.compile records its graphs through the Fused recorder: a capture is never diverted,
    # whatever the advisor decided for the loop around it.
    from torch_tpu.dynamo import graph_runner

    advisor(margin=-100.0)
    params, batches = _case(3)
    w = params[0].to("tpu")
    compiled = torch.compile(lambda x: torch.tanh(x @ w).sum(-1), backend="tpu")
    with mode(EagerMode.FUSED):
        _train("tpu", 60, params, batches)
        assert _stats()["fused_patterns_strict"] >= 1
        for x, _ in batches:
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(), torch.tanh(x @ params[0]).sum(-1),
                                       rtol=1e-5, atol=1e-5)
    assert graph_runner.stats["captures"] == 1 and graph_runner.stats["replays"] == 2, graph_runner.stats
