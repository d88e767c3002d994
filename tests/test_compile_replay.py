"""The fast replay path of torch.compile(backend="tpu") (graph_runner + CompiledGraph::run):
outputs are made straight on new storages (no view ops), several outputs viewing one program
result share its storage, tensor-only argument lists are passed on as they are, and inputs of
another layout are captured again instead of replayed. Every result is compared with the same
computation on the CPU."""

import pytest
import torch

import torch_tpu
from torch_tpu.dynamo import graph_runner

from helpers import assert_close

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _views_of_one_result(a, b):
    y = a * b + 1
    return y, y[1:], y.t(), (a - b).sum(0)


def test_outputs_viewing_one_result_share_its_storage_on_replay():
    gen = torch.Generator().manual_seed(0)
    f = torch.compile(_views_of_one_result, backend="tpu")
    for _ in range(3):  # capture, then replays
        a, b = torch.randn(4, 3, generator=gen), torch.randn(4, 3, generator=gen)
        outs = f(a.to("tpu"), b.to("tpu"))
        for got, want in zip(outs, _views_of_one_result(a, b)):
            assert_close(got, want)
            assert got.stride() == want.stride() and got.storage_offset() == want.storage_offset()
    assert graph_runner.stats["replays"] >= 2, graph_runner.stats
    y, tail, yt, _ = outs
    # As in eager: the views alias their base, so a write through one is seen by the others.
    y.add_(1)
    assert_close(tail, (y.cpu())[1:])
    assert_close(yt, y.cpu().t())


def test_training_replay_matches_cpu():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model.load_state_dict(cpu_model.state_dict())
    model.to("tpu")
    step = torch.compile(model, backend="tpu")
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(5, 8, generator=gen)
        for p, q in zip(model.parameters(), cpu_model.parameters()):
            p.grad, q.grad = None, None
        loss = step(x.to("tpu")).square().mean()
        loss.backward()
        cpu_loss = cpu_model(x).square().mean()
        cpu_loss.backward()
        assert_close(loss, cpu_loss)
        for p, q in zip(model.parameters(), cpu_model.parameters()):
            assert_close(p.grad, q.grad)
    assert graph_runner.stats["replays"] >= 4 and graph_runner.stats["rerecorded_calls"] == 0


def test_input_mutation_is_written_back_on_replay():
    def bump(buf, x):
        buf.mul_(2).add_(x)
        return buf.sum()

    f = torch.compile(bump, backend="tpu")
    gen = torch.Generator().manual_seed(2)
    buf_cpu = torch.randn(6, generator=gen)
    buf = buf_cpu.to("tpu")
    for _ in range(3):
        x = torch.randn(6, generator=gen)
        got, want = f(buf, x.to("tpu")), bump(buf_cpu, x)
        assert_close(got, want)
        assert_close(buf, buf_cpu)
    assert graph_runner.stats["replays"] >= 2


def test_another_input_layout_is_captured_again_not_replayed(monkeypatch):
    graphs = []
    init = graph_runner._Variant.__init__

    def recording_init(self, graph, template, host_values):
        graphs.append(graph)
        init(self, graph, template, host_values)

    monkeypatch.setattr(graph_runner._Variant, "__init__", recording_init)

    def g(a):
        return (a * 3).cos()

    f = torch.compile(g, backend="tpu")
    a = torch.randn(4, 6)
    assert_close(f(a.to("tpu")), g(a))
    assert len(graphs) == 1
    # The C++ replay refuses (None) inputs of another layout, device or count - never a wrong result.
    base = torch.randn(7, 4).to("tpu")
    assert graphs[0].run([base[1:].t()]) is None  # same shape, other strides and offset
    assert graphs[0].run([torch.randn(4, 6)]) is None  # a CPU tensor
    assert graphs[0].run([]) is None
    with pytest.raises(TypeError):
        graphs[0].run([None])
    replays = graph_runner.stats["replays"]
    view = torch.randn(7, 4)[1:].t()
    assert_close(f(view.to("tpu")), g(view))
    assert graph_runner.stats["replays"] == replays  # captured for the new layout instead


def test_replay_host_stats_count_pjrt_time():
    f = torch.compile(lambda a: a.exp() + 1, backend="tpu")
    a = torch.randn(32)
    f(a.to("tpu"))
    before = torch_tpu._C._replay_host_stats()
    assert_close(f(a.to("tpu")), a.exp() + 1)
    torch.tpu.synchronize()
    after = torch_tpu._C._replay_host_stats()
    assert len(after) == 3 and all(isinstance(v, int) for v in after)
    assert after[0] > before[0]  # the replay's Execute call was timed
    assert all(x >= y for x, y in zip(after, before))


def _returns_an_input_and_views_of_it(x, y):
    return x, x.t(), x[1:], x * y


def test_outputs_aliasing_inputs_are_the_input_or_views_sharing_its_version_counter():
    # Run directly through the runner (no AOTAutograd regenerating aliases): the captured replay
    # must hand back what running the graph gives - the input object itself, and views that
    # share its storage and version counter (autograd's saved-tensor check relies on it).
    gm = torch.fx.symbolic_trace(_returns_an_input_and_views_of_it)
    runner = graph_runner.CompiledFxGraph(gm, "inference")
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):  # capture, then replays
        xc, yc = torch.randn(4, 3, generator=gen), torch.randn(4, 3, generator=gen)
        x, y = xc.to("tpu"), yc.to("tpu")
        outs = runner(x, y)
        for got, want in zip(outs, _returns_an_input_and_views_of_it(xc, yc)):
            assert_close(got, want)
            assert got.stride() == want.stride() and got.storage_offset() == want.storage_offset()
        assert outs[0] is x
        assert outs[1].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        before = outs[1]._version
        x.add_(1)
        assert outs[1]._version == outs[2]._version == x._version == before + 1
        assert_close(outs[1], x.cpu().t())
        assert_close(outs[2], x.cpu()[1:])
    assert graph_runner.stats["replays"] >= 2, graph_runner.stats


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_an_in_place_change_of_a_saved_input_is_caught_as_in_eager(device):
    # The forward graph saves the weight (or a view of it) for the backward; changing the
    # weight in place before backward must raise as PyTorch does, not give a silent wrong grad.
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(8, 8, device=device))
    x = torch.randn(4, 8, device=device, requires_grad=True)
    f = torch.compile(lambda x: torch.nn.functional.linear(x, w.t()).sin().sum(),
                      backend="tpu" if device == "tpu" else "eager")
    for _ in range(2):
        f(x).backward()  # capture, then a replay
    loss = f(x)
    with torch.no_grad():
        w.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
