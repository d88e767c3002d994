"""torch.compile(backend="tpu") behaviour: backend and device interface registration, graph
breaks and fullgraph errors, static and dynamic shapes (with the per-graph shape limit),
no_grad / inference_mode / autocast, unused Inductor settings, input mutation and aliasing,
random ops, host inputs, CPU fallbacks inside a graph, and the eager modes around it. Every
result is compared with the same computation in eager mode on the CPU."""

import warnings

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import torch_tpu
from device_marks import needs_two_devices
from torch_tpu.dynamo import TpuInterface, graph_runner
from torch_tpu.execution_mode import EagerMode, mode


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def mlp_params(gen):
    return (torch.randn(8, 16, generator=gen), torch.randn(16, generator=gen), torch.randn(4, 16, generator=gen))


def mlp(x, w1, b1, w2):
    return F.linear(torch.relu(F.linear(x, w1.t(), b1)), w2)


def tpu(*ts):
    return [t.to("tpu") for t in ts]


def test_backend_and_device_interface_are_registered():
    assert "tpu" in torch._dynamo.list_backends(exclude_tags=())
    from torch._dynamo.device_interface import get_interface_for_device

    interface = get_interface_for_device("tpu")
    assert interface is TpuInterface
    assert interface.is_available() and interface.device_count() >= 1
    assert interface.current_device() == torch.tpu.current_device()
    interface.synchronize()


def test_compiled_function_matches_cpu_and_replays():
    gen = torch.Generator().manual_seed(0)
    x, params = torch.randn(5, 8, generator=gen), mlp_params(gen)
    f = torch.compile(mlp, backend="tpu")
    out = f(*tpu(x, *params))
    torch.testing.assert_close(out.cpu(), mlp(x, *params), rtol=1e-5, atol=1e-5)
    assert graph_runner.stats["captures"] == 1
    x2 = torch.randn(5, 8, generator=gen)
    out2 = f(*tpu(x2, *params))
    torch.testing.assert_close(out2.cpu(), mlp(x2, *params), rtol=1e-5, atol=1e-5)
    assert graph_runner.stats == {"captures": 1, "replays": 1, "rerecorded_calls": 0, "op_by_op_calls": 0,
                                  "padded_calls": 0}


def test_views_at_other_offsets_or_of_other_storages_are_not_replayed_as_the_captured_one():
    # Dynamo guards sizes and strides, not where a view starts in its storage or how large the
    # storage is: the replay check must tell these calls apart itself.
    f = torch.compile(lambda x: x * 2 + 1, backend="tpu")
    base = torch.arange(12, dtype=torch.float32)
    tb = base.to("tpu")
    for lo in (0, 1, 3, 0):
        torch.testing.assert_close(f(tb[lo:lo + 8]).cpu(), base[lo:lo + 8] * 2 + 1)
    bigger = torch.arange(20, dtype=torch.float32) - 5
    torch.testing.assert_close(f(bigger.to("tpu")[0:8]).cpu(), bigger[0:8] * 2 + 1)
    torch.testing.assert_close(f(tb[0:8]).cpu(), base[0:8] * 2 + 1)


def test_graph_break_runs_pieces_and_fullgraph_names_the_cause():
    def f(x):
        y = torch.sin(x) * 2
        torch._dynamo.graph_break()
        return torch.cos(y) + 1

    x = torch.randn(6)
    out = torch.compile(f, backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), f(x), rtol=1e-5, atol=1e-5)
    assert graph_runner.stats["captures"] == 2  # one graph before the break, one after
    torch._dynamo.reset()
    with pytest.raises(Exception, match="graph_break"):
        torch.compile(f, backend="tpu", fullgraph=True)(x.to("tpu"))

    def data_dependent(x):
        if x.sum() > 0:  # needs the value on the host: a graph break
            return x + 1
        return x - 1

    with pytest.raises(Exception, match="(?i)data.dependent|Tensor.*bool|generic_jump"):
        torch.compile(data_dependent, backend="tpu", fullgraph=True)(x.to("tpu"))
    torch._dynamo.reset()
    out = torch.compile(data_dependent, backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), data_dependent(x))


def test_static_shapes_capture_per_shape():
    f = torch.compile(lambda x: (x * 2).sum(0), backend="tpu", dynamic=False)
    for n in (3, 5, 3, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x.to("tpu")).cpu(), (x * 2).sum(0))
    assert graph_runner.stats["captures"] == 2 and graph_runner.stats["replays"] == 2


@pytest.mark.parametrize("how", ["dynamic", "mark_dynamic"])
def test_dynamic_shapes_compile_per_shape_under_a_limit(how, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_COMPILE_SHAPE_LIMIT", "2")

    def g(x):
        return torch.tanh(x).sum(0) * x.shape[0]

    f = torch.compile(g, backend="tpu", dynamic=True if how == "dynamic" else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (3, 5, 3, 7, 7):
            x = torch.randn(n, 4)
            xt = x.to("tpu")
            if how == "mark_dynamic":
                torch._dynamo.mark_dynamic(xt, 0)
            torch.testing.assert_close(f(xt).cpu(), g(x), rtol=1e-5, atol=1e-5)
    # One Dynamo graph with a symbolic size; programs for 3 and 5, then the limit: 7 runs op by op.
    assert graph_runner.stats["captures"] == 2
    assert graph_runner.stats["replays"] == 1
    assert graph_runner.stats["op_by_op_calls"] == 2
    limit_warnings = [w for w in caught if "TORCH_TPU_COMPILE_SHAPE_LIMIT" in str(w.message)]
    assert len(limit_warnings) == 1 and "(7, 4)" in str(limit_warnings[0].message)


def test_no_grad_inference_mode_and_autocast():
    gen = torch.Generator().manual_seed(1)
    x, params = torch.randn(5, 8, generator=gen), mlp_params(gen)
    f = torch.compile(mlp, backend="tpu")
    with torch.no_grad():
        out = f(*tpu(x, *params))
    assert not out.requires_grad
    torch.testing.assert_close(out.cpu(), mlp(x, *params), rtol=1e-5, atol=1e-5)
    with torch.inference_mode():
        out = f(*tpu(x, *params))
    torch.testing.assert_close(out.cpu(), mlp(x, *params), rtol=1e-5, atol=1e-5)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        out = f(*tpu(x, *params))
        eager = mlp(*tpu(x, *params))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cpu = mlp(x, *params)
    assert out.dtype == eager.dtype == cpu.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), eager.cpu(), rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(out.cpu(), cpu, rtol=3e-2, atol=3e-2)


def test_compiled_training_of_a_module_with_requires_grad_inputs():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(5, 8, generator=gen)
    params = [p.requires_grad_() for p in mlp_params(gen)]
    tparams = [p.detach().to("tpu").requires_grad_() for p in params]
    f = torch.compile(mlp, backend="tpu")
    for _ in range(2):
        for p in tparams:
            p.grad = None
        f(x.to("tpu"), *tparams).square().mean().backward()
    for p in params:
        p.grad = None
    mlp(x, *params).square().mean().backward()
    for p, t in zip(params, tparams):
        torch.testing.assert_close(t.grad.cpu(), p.grad, rtol=1e-5, atol=1e-5)
    assert graph_runner.stats["captures"] == 2  # forward and backward, replayed on the second step
    assert graph_runner.stats["replays"] == 2


def _pointwise_chain(x, w):
    return (x.sin().exp().cos() * w).sum()


def test_the_forward_saves_only_what_the_backward_cannot_recompute(monkeypatch):
    # Min-cut partition, as Inductor's: the pointwise chain is recomputed inside the backward
    # program instead of being saved (AOTAutograd's default partition saves sin, exp and cos
    # too: 6 forward outputs instead of 4), and the gradients still equal the CPU's.
    outputs = {}
    init = graph_runner.CompiledFxGraph.__init__

    def recording_init(self, gm, kind):
        outputs[kind] = len(next(n for n in gm.graph.nodes if n.op == "output").args[0])
        init(self, gm, kind)

    monkeypatch.setattr(graph_runner.CompiledFxGraph, "__init__", recording_init)
    gen = torch.Generator().manual_seed(5)
    x, w = torch.randn(16, generator=gen), torch.randn(16, generator=gen)
    xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
    x.requires_grad_(), w.requires_grad_()
    f = torch.compile(_pointwise_chain, backend="tpu")
    for _ in range(2):  # capture, then replay
        xt.grad = wt.grad = None
        f(xt, wt).backward()
    _pointwise_chain(x, w).backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=1e-5, atol=1e-5)
    assert outputs["forward"] <= 4, outputs  # the loss and what it cannot recompute
    assert graph_runner.stats["replays"] == 2


def test_inductor_mode_and_options_are_accepted_with_a_note():
    x = torch.randn(4, 4)
    with pytest.warns(UserWarning, match="no effect on the tpu backend"):
        out = torch.compile(torch.sin, backend="tpu", mode="max-autotune")(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), torch.sin(x))
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match="option 'some_inductor_flag'"):
        out = torch.compile(torch.cos, backend="tpu", options={"some_inductor_flag": 1})(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), torch.cos(x))


def test_input_mutation_and_aliased_outputs():
    def f(x, buf):
        buf.add_(x)  # an in-place update of an input, like a BatchNorm running stat
        return x[1:], buf * 2

    x, buf = torch.randn(4, 3), torch.zeros(4, 3)
    cf = torch.compile(f, backend="tpu")
    tx, tbuf = x.to("tpu"), buf.to("tpu")
    for _ in range(3):
        view, doubled = cf(tx, tbuf)
        view_cpu, doubled_cpu = f(x, buf)
        torch.testing.assert_close(tbuf.cpu(), buf)
        torch.testing.assert_close(doubled.cpu(), doubled_cpu)
        torch.testing.assert_close(view.cpu(), view_cpu)
    view.mul_(0)  # the returned slice is still a view of x
    assert float(tx[1:].abs().sum()) == 0.0
    assert graph_runner.stats["replays"] >= 1


def test_random_ops_draw_new_numbers_each_call():
    def f(x):
        return F.dropout(x, p=0.5, training=True)

    x = torch.ones(4096)
    cf = torch.compile(f, backend="tpu")
    torch.tpu.manual_seed(123)
    a, b = cf(x.to("tpu")).cpu(), cf(x.to("tpu")).cpu()
    assert not torch.equal(a, b)
    for out in (a, b):
        kept = (out != 0).float().mean().item()
        assert 0.45 < kept < 0.55
        assert torch.all((out == 0) | (out == 2.0))
    # The same generator state gives the same numbers as eager mode.
    torch.tpu.manual_seed(123)
    eager = f(x.to("tpu")).cpu()
    torch.testing.assert_close(a, eager)


def test_host_inputs_and_a_non_capturable_optimizer():
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(6, generator=gen)
    tw = w.to("tpu").requires_grad_()
    cw = w.clone().requires_grad_()
    opts = [torch.optim.Adam([tw], lr=0.1), torch.optim.Adam([cw], lr=0.1)]  # step counts on the CPU

    def step(p, opt):
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()

    cstep = torch.compile(step, backend="tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            cstep(tw, opts[0])
            step(cw, opts[1])
    torch.testing.assert_close(tw.detach().cpu(), cw.detach(), rtol=1e-5, atol=1e-6)
    assert any("capturable=True" in str(w.message) for w in caught)


def test_an_op_that_falls_back_inside_a_graph():
    def f(a, b):  # nan_to_num has no tpu lowering for complex values
        return torch.nan_to_num((a + b).to(torch.complex64)).abs().sort().values + 1

    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(4, 4, generator=gen), torch.randn(4, 4, generator=gen)
    cf = torch.compile(f, backend="tpu")
    torch_tpu.reset_fallback_counts()
    with pytest.warns(UserWarning, match="recorded again on every call"):
        out = cf(*tpu(a, b))
    torch.testing.assert_close(out.cpu(), f(a, b))
    out = cf(*tpu(b, 2 * a))
    torch.testing.assert_close(out.cpu(), f(b, 2 * a))
    assert torch_tpu.fallback_counts().get("aten::nan_to_num.out", 0) >= 1


@pytest.mark.parametrize("eager_mode", [EagerMode.DEBUG, EagerMode.FUSED])
def test_compiled_graphs_in_every_eager_mode(eager_mode):
    gen = torch.Generator().manual_seed(4)
    x, params = torch.randn(5, 8, generator=gen), mlp_params(gen)
    f = torch.compile(mlp, backend="tpu")
    with mode(eager_mode):
        for _ in range(2):
            tx = x.to("tpu") * 1.0  # pending in Fused mode: flushed before the compiled graph reads it
            out = f(tx, *tpu(*params)) + 1
        result = out.cpu()
    torch.testing.assert_close(result, mlp(x, *params) + 1, rtol=1e-5, atol=1e-5)
    assert graph_runner.stats["replays"] == 1


# A new process compiling the same function: the compiled graph's program comes from the disk tier.
_CHILD = r"""
import json, torch, torch_tpu
import torch.nn.functional as F
def f(x, w):
    return F.gelu(x @ w).sum(0)
g = torch.Generator().manual_seed(0)
x, w = torch.randn(6, 5, generator=g), torch.randn(5, 3, generator=g)
out = torch.compile(f, backend="tpu")(x.to("tpu"), w.to("tpu")).cpu()
torch.testing.assert_close(out, f(x, w), rtol=1e-5, atol=1e-5)
s = torch.tpu.compilation_cache_stats()
print(json.dumps({"compiles": s["compiles"], "disk_loads": s["disk_loads"], "graphs": s["fused_graph_compiles"]}))
"""


def test_compiled_graphs_are_loaded_from_the_disk_cache_in_a_new_process(tmp_path):
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TORCH_TPU_CACHE_DIR": str(tmp_path)}

    def child():
        r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    cold, warm = child(), child()
    assert cold["compiles"] >= 1 and cold["graphs"] == 1
    assert warm["compiles"] == 0 and warm["disk_loads"] >= 1


@needs_two_devices
def test_a_second_device_and_cpu_only_graphs():
    gen = torch.Generator().manual_seed(5)
    x, params = torch.randn(5, 8, generator=gen), mlp_params(gen)
    f = torch.compile(mlp, backend="tpu")
    on1 = [t.to("tpu:1") for t in (x, *params)]
    for _ in range(2):
        out = f(*on1)
    assert out.device == torch.device("tpu:1")
    torch.testing.assert_close(out.cpu(), mlp(x, *params), rtol=1e-5, atol=1e-5)
    assert graph_runner.stats["replays"] == 1
    # A graph with no tpu tensors runs as it is, random ops included (never frozen).
    g = torch.compile(lambda n: torch.rand(n.shape) + n, backend="tpu")
    a, b = g(torch.zeros(16)), g(torch.zeros(16))
    assert a.device.type == "cpu" and not torch.equal(a, b)


def _mark_batch_dynamic(t):
    torch._dynamo.mark_dynamic(t, 0)
    return t


def test_a_dynamic_batch_is_padded_to_buckets():
    import copy

    import models

    torch.manual_seed(0)
    for model, make in [
        (torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)),
         lambda n, g: torch.randn(n, 8, generator=g)),
        (models.Llama(), lambda n, g: torch.randint(0, 256, (n, 16), generator=g)),
    ]:
        torch._dynamo.reset()
        graph_runner.reset_stats()
        model.eval()
        compiled = torch.compile(copy.deepcopy(model).to("tpu"), backend="tpu")
        with torch.no_grad():
            for n in (3, 5, 6, 7, 4, 3):
                x = make(n, torch.Generator().manual_seed(n))
                out = compiled(_mark_batch_dynamic(x.to("tpu")))
                assert out.shape[0] == n
                torch.testing.assert_close(out.cpu(), model(x), rtol=1e-4, atol=1e-4)
        # Sizes 3 and 4 share the bucket 4, sizes 5 to 7 the bucket 8: two programs.
        assert graph_runner.stats["captures"] == 2, graph_runner.stats
        assert graph_runner.stats["padded_calls"] == 5  # every size but 4
        assert graph_runner.stats["replays"] == 4


@pytest.mark.parametrize("case", ["reduce_over_batch", "size_as_value", "softmax_over_batch", "dynamic_sequence"])
def test_dynamic_sizes_that_padding_would_change_are_not_padded(case):
    import models

    torch.manual_seed(0)
    if case == "dynamic_sequence":  # attention mixes positions along the dynamic dimension
        model = models.Llama().eval()
        fn, dim, make = model, 1, lambda n: torch.randint(0, 256, (2, n))
    else:
        fn = {
            "reduce_over_batch": lambda x: torch.relu(x).mean(0),
            "size_as_value": lambda x: x * x.shape[0],
            "softmax_over_batch": lambda x: torch.softmax(x, dim=0),
        }[case]
        dim, make = 0, lambda n: torch.randn(n, 4)
    import copy

    on_tpu = copy.deepcopy(fn).to("tpu") if isinstance(fn, torch.nn.Module) else fn
    compiled = torch.compile(on_tpu, backend="tpu")
    with torch.no_grad():
        for n in (3, 5, 3):
            x = make(n)
            xt = x.to("tpu")
            torch._dynamo.mark_dynamic(xt, dim)
            torch.testing.assert_close(compiled(xt).cpu(), fn(x), rtol=1e-4, atol=1e-4)
    assert graph_runner.stats["padded_calls"] == 0
    assert graph_runner.stats["captures"] == 2  # one program per size


@pytest.mark.parametrize("case", ["view_of_input", "view_and_compute"])
def test_an_output_that_views_a_dynamic_input_is_not_padded(case):
    # AOTAutograd rebuilds an output that aliases an input from the unpadded input, with the
    # padded output's base: padding that graph made every size but a bucket's fail.
    fn = {
        "view_of_input": lambda x: (x.view(x.shape[0], 2, 2),),
        "view_and_compute": lambda x: (torch.relu(x) * 2, x.view(x.shape[0], 2, 2)),
    }[case]
    compiled = torch.compile(fn, backend="tpu")
    with torch.no_grad():
        for n in (3, 5, 3, 6):
            x = torch.randn(n, 4)
            xt = x.to("tpu")
            torch._dynamo.mark_dynamic(xt, 0)
            for got, expected in zip(compiled(xt), fn(x)):
                assert (got.shape, got.stride()) == (expected.shape, expected.stride())
                torch.testing.assert_close(got.cpu(), expected)
    assert graph_runner.stats["padded_calls"] == 0


def test_a_training_step_with_a_changed_batch_size():
    gen = torch.Generator().manual_seed(6)
    params = [p.requires_grad_() for p in mlp_params(gen)]
    tparams = [p.detach().to("tpu").requires_grad_() for p in params]
    opt = torch.optim.SGD(params, lr=0.1)
    topt = torch.optim.SGD(tparams, lr=0.1)

    def step(x, ps, o):
        o.zero_grad()
        loss = mlp(x, *ps).square().mean()
        loss.backward()
        o.step()
        return loss.detach()

    cstep = torch.compile(step, backend="tpu")
    for n in (4, 4, 3, 3, 4):
        x = torch.randn(n, 8, generator=gen)
        torch.testing.assert_close(cstep(x.to("tpu"), tparams, topt).cpu(), step(x, params, opt), rtol=1e-5, atol=1e-5)
        for p, t in zip(params, tparams):
            torch.testing.assert_close(t.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    # Training graphs are not padded: the new batch size is one more set of programs, then replays.
    assert graph_runner.stats["padded_calls"] == 0
    assert graph_runner.stats["replays"] > 0
