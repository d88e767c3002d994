"""RNN layers on the device: nn.LSTM / nn.GRU / nn.RNN (tanh, relu) and their cells, multi-layer,
bidirectional, batch_first, proj_size, no bias, dropout between layers and packed sequences,
forward and backward, in eager mode and under torch.compile(backend="tpu"). The fused LSTM/GRU
cells (aten::_thnn_fused_*) run as tpu programs; every test runs in strict fallback mode and
checks that nothing fell back to the CPU. Each result is compared with the same module (same
weights) on the CPU."""

import copy

import pytest
import torch
import torch._dynamo
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torch_tpu
from helpers import assert_close

T, B, I, H = 3, 2, 4, 5
TOL = dict(rtol=2e-5, atol=2e-5)


# Strict mode (an op without a tpu kernel raises) and no CPU fallback, for every test.
pytestmark = pytest.mark.usefixtures("strict_no_fallback")


def make_module(kind, seed=0, **kwargs):
    torch.manual_seed(seed)
    cls = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU, "RNN": torch.nn.RNN}[kind]
    cpu = cls(I, H, **kwargs)
    return cpu, copy.deepcopy(cpu).to("tpu")


def initial_state(kind, module, gen):
    """h0 (and c0 for an LSTM) shaped for an unpacked batch of B, requiring grad."""
    d = 2 if module.bidirectional else 1
    h_size = module.proj_size if getattr(module, "proj_size", 0) else H
    h0 = torch.randn(module.num_layers * d, B, h_size, generator=gen)
    if kind != "LSTM":
        return [h0]
    return [h0, torch.randn(module.num_layers * d, B, H, generator=gen)]


def leaves(ts, device):
    return [t.detach().to(device).requires_grad_() for t in ts]


def run_module(kind, module, x, state):
    out, hn = module(x, tuple(state) if kind == "LSTM" else state[0])
    finals = list(hn) if kind == "LSTM" else [hn]
    return out, finals


def check_against_cpu(kind, cpu, dev, x, state, **tol):
    """Forward outputs, final states and every gradient (input, states, parameters) equal the CPU's."""
    tol = tol or TOL
    xs, states = {}, {}
    results = {}
    for name, module in (("cpu", cpu), ("tpu", dev)):
        xs[name], states[name] = leaves([x], name)[0], leaves(state, name)
        out, finals = run_module(kind, module, xs[name], states[name])
        # A weighted sum so every output element gets a distinct gradient.
        weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(name)
        loss = (out * weights).sum() + sum((f * f).sum() for f in finals)
        loss.backward()
        results[name] = (out, finals)
    assert_close(results["tpu"][0], results["cpu"][0], **tol)
    for got, want in zip(results["tpu"][1], results["cpu"][1]):
        assert_close(got, want, **tol)
    assert_close(xs["tpu"].grad, xs["cpu"].grad, **tol)
    for got, want in zip(states["tpu"], states["cpu"]):
        assert_close(got.grad, want.grad, **tol)
    for (name, p_cpu), (_, p_dev) in zip(cpu.named_parameters(), dev.named_parameters()):
        assert p_dev.grad is not None, name
        assert_close(p_dev.grad, p_cpu.grad, **tol)


LAYER_CASES = [
    ("LSTM", {}),
    ("LSTM", dict(num_layers=2, bidirectional=True, batch_first=True)),
    ("LSTM", dict(proj_size=3, num_layers=2)),
    ("LSTM", dict(bias=False, bidirectional=True)),
    ("GRU", {}),
    ("GRU", dict(num_layers=2, bidirectional=True, batch_first=True)),
    ("GRU", dict(bias=False)),
    ("RNN", dict(num_layers=2, bidirectional=True)),
    ("RNN", dict(nonlinearity="relu", batch_first=True)),
]


@pytest.mark.parametrize("kind,kwargs", LAYER_CASES, ids=[f"{k}-{'-'.join(kw) or 'plain'}" for k, kw in LAYER_CASES])
def test_layer_forward_backward_matches_cpu(kind, kwargs):
    cpu, dev = make_module(kind, **kwargs)
    gen = torch.Generator().manual_seed(1)
    shape = (B, T, I) if kwargs.get("batch_first") else (T, B, I)
    x = torch.randn(*shape, generator=gen)
    check_against_cpu(kind, cpu, dev, x, initial_state(kind, cpu, gen))


def programs_run(fn):
    """How many device programs ``fn`` ran."""
    before = torch.tpu.compilation_cache_stats()["executions"]
    fn()
    torch.tpu.synchronize()
    return torch.tpu.compilation_cache_stats()["executions"] - before


def test_lstm_layers_run_as_one_program_each_whatever_the_length():
    """nn.LSTM runs each layer and direction as one program forward and one backward (the time
    loop inside it, lowering/lstm_layer.cc), not a few per time step: the count does not grow
    with the sequence, and long sequences still equal the CPU, reversed direction included."""
    cpu, dev = make_module("LSTM", num_layers=2, bidirectional=True, batch_first=True)
    gen = torch.Generator().manual_seed(21)
    counts = {}
    for steps in (4, 29):
        x = torch.randn(B, steps, I, generator=gen)
        state = initial_state("LSTM", cpu, gen)
        cpu.zero_grad()
        dev.zero_grad()
        check_against_cpu("LSTM", cpu, dev, x, state)
        xd = x.to("tpu").requires_grad_()

        def step():
            out, (h, c) = dev(xd, tuple(s.to("tpu") for s in state))
            (out.sum() + h.sum() + c.sum()).backward()

        step()  # compiles
        counts[steps] = programs_run(step)
    assert counts[4] == counts[29], counts  # ATen's loop: several more per time step


def test_lstm_layers_in_inference_mode_match_cpu():
    cpu, dev = make_module("LSTM", num_layers=2, bias=False)
    gen = torch.Generator().manual_seed(22)
    counts = {}
    for steps in (5, 23):
        x = torch.randn(steps, B, I, generator=gen)
        with torch.inference_mode():
            got, (h, c) = dev(x.to("tpu"))
            counts[steps] = programs_run(lambda: dev(x.to("tpu")))
        want, (h_cpu, c_cpu) = cpu(x)
        assert_close(got, want.detach(), **TOL)
        assert_close(h, h_cpu.detach(), **TOL)
        assert_close(c, c_cpu.detach(), **TOL)
    assert counts[5] == counts[23], counts


def test_double_backward_through_lstm_layers():
    """create_graph=True differentiates the layer's backward (PyTorch's differentiable formula for
    aten::mkldnn_rnn_layer, run op by op on the device)."""
    cpu, dev = make_module("LSTM")
    x = torch.randn(T, B, I, generator=torch.Generator().manual_seed(23))
    grads = {}
    for name, module in (("cpu", cpu), ("tpu", dev)):
        inp = x.detach().to(name).requires_grad_()
        out, _ = module(inp)
        (g,) = torch.autograd.grad(out.pow(2).sum(), inp, create_graph=True)
        g.pow(2).sum().backward()
        grads[name] = (g, inp.grad, [p.grad for p in module.parameters()])
    assert_close(grads["tpu"][0], grads["cpu"][0].detach(), **TOL)
    assert_close(grads["tpu"][1], grads["cpu"][1], **TOL)
    for got, want in zip(grads["tpu"][2], grads["cpu"][2]):
        assert_close(got, want, **TOL)


@pytest.mark.parametrize("kwargs,message", [
    (dict(mode=3), "only LSTM layers"),
    (dict(batch_first=True), "time-major"),
    (dict(batch_sizes=[2, 1, 1]), "packed sequences"),
])
def test_lstm_layer_op_rejects_what_it_does_not_implement(kwargs, message):
    """aten::mkldnn_rnn_layer on tpu is the whole-layer LSTM; other uses get a clear error."""
    t = lambda *shape: torch.randn(*shape).to("tpu")  # noqa: E731
    args = dict(reverse=False, batch_sizes=[], mode=2, hidden_size=H, num_layers=1, has_biases=True,
                bidirectional=False, batch_first=False, train=True)
    args.update(kwargs)
    with pytest.raises(RuntimeError, match=message):
        torch.ops.aten.mkldnn_rnn_layer(t(T, B, I), t(4 * H, I), t(4 * H, H), t(4 * H), t(4 * H), t(B, H), t(B, H),
                                        *args.values())


def test_layer_without_initial_state_and_unbatched_input():
    cpu, dev = make_module("LSTM", num_layers=2)
    x = torch.randn(T, I, generator=torch.Generator().manual_seed(2))  # unbatched: [T, I]
    out_cpu, (h_cpu, c_cpu) = cpu(x)
    out_dev, (h_dev, c_dev) = dev(x.to("tpu"))
    assert_close(out_dev, out_cpu, **TOL)
    assert_close(h_dev, h_cpu, **TOL)
    assert_close(c_dev, c_cpu, **TOL)


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "RNNCell-tanh", "RNNCell-relu"])
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
def test_cell_forward_backward_matches_cpu(kind, batched):
    torch.manual_seed(3)
    if kind.startswith("RNNCell"):
        cpu = torch.nn.RNNCell(I, H, nonlinearity=kind.split("-")[1])
    else:
        cpu = getattr(torch.nn, kind)(I, H)
    dev = copy.deepcopy(cpu).to("tpu")
    gen = torch.Generator().manual_seed(4)
    lead = (B,) if batched else ()
    x = torch.randn(*lead, I, generator=gen)
    state = [torch.randn(*lead, H, generator=gen) for _ in range(2 if kind == "LSTMCell" else 1)]
    grads = {}
    for name, module in (("cpu", cpu), ("tpu", dev)):
        xi, si = leaves([x], name)[0], leaves(state, name)
        # Two steps, so the second consumes the first's state (and its backward chains).
        h = tuple(si) if kind == "LSTMCell" else si[0]
        for _ in range(2):
            h = module(xi, h)
        outs = list(h) if kind == "LSTMCell" else [h]
        sum((o * o).sum() + o.sum() for o in outs).backward()
        grads[name] = (outs, xi.grad, [s.grad for s in si], [p.grad for p in module.parameters()])
    (outs_t, gx_t, gs_t, gp_t), (outs_c, gx_c, gs_c, gp_c) = grads["tpu"], grads["cpu"]
    for got, want in zip(outs_t + [gx_t] + gs_t + gp_t, outs_c + [gx_c] + gs_c + gp_c):
        assert_close(got, want, **TOL)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("enforce_sorted", [True, False], ids=["sorted", "unsorted"])
def test_packed_sequences_match_cpu(kind, enforce_sorted):
    cpu, dev = make_module(kind, num_layers=2, bidirectional=True, batch_first=True)
    gen = torch.Generator().manual_seed(5)
    lengths = torch.tensor([4, 3, 1] if enforce_sorted else [2, 4, 3])  # on the host, as PyTorch requires
    x = torch.randn(3, 4, I, generator=gen)
    results = {}
    for name, module in (("cpu", cpu), ("tpu", dev)):
        xi = leaves([x], name)[0]
        packed = pack_padded_sequence(xi, lengths, batch_first=True, enforce_sorted=enforce_sorted)
        out_packed, hn = module(packed)
        out, out_lengths = pad_packed_sequence(out_packed, batch_first=True)
        finals = list(hn) if kind == "LSTM" else [hn]
        weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(name)
        ((out * weights).sum() + sum(f.sum() for f in finals)).backward()
        results[name] = (out, out_lengths, finals, xi.grad, [p.grad for p in module.parameters()])
    out_t, len_t, fin_t, gx_t, gp_t = results["tpu"]
    out_c, len_c, fin_c, gx_c, gp_c = results["cpu"]
    assert torch.equal(len_t, len_c)
    for got, want in zip([out_t, gx_t] + fin_t + gp_t, [out_c, gx_c] + fin_c + gp_c):
        assert_close(got, want, **TOL)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_dropout_between_layers(kind):
    cpu, dev = make_module(kind, num_layers=2, dropout=0.5)
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(T, B, I, generator=gen)
    # Eval mode: dropout is off, so results equal the CPU's.
    cpu.eval(), dev.eval()
    with torch.no_grad():
        assert_close(dev(x.to("tpu"))[0], cpu(x)[0], **TOL)
    # Train mode: the device's own random mask (no CPU equivalent); shapes and gradients are sane.
    dev.train()
    xd = x.to("tpu").requires_grad_()
    out, _ = dev(xd)
    assert out.shape == (T, B, H)
    out.sum().backward()
    assert torch.isfinite(xd.grad.cpu()).all()
    for p in dev.parameters():
        assert p.grad is not None and torch.isfinite(p.grad.cpu()).all()
    # dropout=0 in train mode is exactly the plain layer.
    cpu0, dev0 = make_module(kind, num_layers=2, dropout=0.0)
    check_against_cpu(kind, cpu0, dev0, x, initial_state(kind, cpu0, gen))


def test_bfloat16_lstm_matches_cpu():
    cpu, dev = make_module("LSTM", num_layers=2)
    cpu, dev = cpu.to(torch.bfloat16), dev.to(torch.bfloat16)
    x = torch.randn(T, B, I, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    with torch.no_grad():
        out_cpu, _ = cpu(x)
        out_dev, _ = dev(x.to("tpu"))
    assert_close(out_dev, out_cpu, rtol=2e-2, atol=2e-2)


def test_fused_cell_backward_kernels_match_the_differentiable_formulas():
    """The tpu backward kernels equal PyTorch's composite formulas (run on the CPU), including a
    step that only got a gradient through h or through c (called as autograd calls them: without
    grad mode)."""
    with torch.no_grad():
        check_fused_backward_kernels()


def check_fused_backward_kernels():
    gen = torch.Generator().manual_seed(8)
    ig, hg = torch.randn(B, 4 * H, generator=gen), torch.randn(B, 4 * H, generator=gen)
    bi, bh, cx = torch.randn(4 * H, generator=gen), torch.randn(4 * H, generator=gen), torch.randn(B, H, generator=gen)
    g_h, g_c = torch.randn(B, H, generator=gen), torch.randn(B, H, generator=gen)
    aten = torch.ops.aten
    hy, cy, ws = aten._thnn_fused_lstm_cell(*[t.to("tpu") for t in (ig, hg, cx, bi, bh)])
    for gh, gc in ((g_h, g_c), (g_h, None), (None, g_c)):
        want = aten._thnn_differentiable_lstm_cell_backward(gh, gc, ig, hg, bi, bh, cx, cy.cpu())
        got = aten._thnn_fused_lstm_cell_backward(
            None if gh is None else gh.to("tpu"), None if gc is None else gc.to("tpu"), cx.to("tpu"), cy, ws, True)
        for g, w in zip(got, want):
            assert_close(g, w, **TOL)
    assert all(t is None for t in aten._thnn_fused_lstm_cell_backward_impl(None, None, cx.to("tpu"), cy, ws, True))

    ig, hg, hx = ig[:, : 3 * H], hg[:, : 3 * H], cx
    bi, bh = bi[: 3 * H], bh[: 3 * H]
    hy, ws = aten._thnn_fused_gru_cell(*[t.to("tpu") for t in (ig, hg, hx, bi, bh)])
    want = aten._thnn_differentiable_gru_cell_backward(g_h, ig, hg, hx, bi, bh)
    got = aten._thnn_fused_gru_cell_backward(g_h.to("tpu"), ws, True)
    for g, w in zip(got, want):
        assert_close(g, w, **TOL)
    no_bias = aten._thnn_fused_gru_cell_backward(g_h.to("tpu"), ws, False)
    assert no_bias[3] is None and no_bias[4] is None
    assert_close(no_bias[0], want[0], **TOL)


def test_double_backward_through_lstm_cell():
    torch.manual_seed(9)
    cpu = torch.nn.LSTMCell(I, H)
    dev = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(B, I, generator=torch.Generator().manual_seed(10))
    second = {}
    for name, module in (("cpu", cpu), ("tpu", dev)):
        xi = leaves([x], name)[0]
        h, c = module(xi)
        (gx,) = torch.autograd.grad((h * c).sum(), xi, create_graph=True)
        (gxx,) = torch.autograd.grad((gx * gx).sum(), xi)
        second[name] = (gx, gxx)
    for got, want in zip(second["tpu"], second["cpu"]):
        assert_close(got, want, **TOL)


@pytest.mark.parametrize("kind,message", [("lstm", "do not match the state"), ("gru", "same shape")])
def test_bad_cell_inputs_raise(kind, message):
    gates = 4 if kind == "lstm" else 3
    ig = torch.randn(B, gates * H, device="tpu")
    hg = torch.randn(B, gates * H + (0 if kind == "lstm" else 1), device="tpu")
    state = torch.randn(B, H + (1 if kind == "lstm" else 0), device="tpu")
    op = getattr(torch.ops.aten, f"_thnn_fused_{kind}_cell")
    with pytest.raises(RuntimeError, match=message):
        op(ig, hg, state)
    with pytest.raises(RuntimeError, match="both be given"):
        op(ig, ig, torch.randn(B, H, device="tpu"), torch.randn(gates * H, device="tpu"), None)


def compiled_train_step(module):
    def step(x, h0):
        out, _ = module(x, h0)
        loss = (out * out).sum()
        loss.backward()
        return out.detach()

    return step


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("allow_rnn", [False, True], ids=["graph_break", "traced"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_torch_compile_matches_cpu(kind, allow_rnn):
    """Dynamo graph-breaks on RNN modules by default (they then run eagerly on the device); with
    torch._dynamo.config.allow_rnn=True it traces them and PyTorch's decomposition unrolls the time
    loop into one graph, compiled whole."""
    from torch_tpu.dynamo import graph_runner

    cpu, dev = make_module(kind, num_layers=2, bidirectional=True)
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(T, B, I, generator=gen)
    state = initial_state(kind, cpu, gen)
    h0 = tuple(state) if kind == "LSTM" else state[0]
    want = compiled_train_step(cpu)(x, h0)
    with torch._dynamo.config.patch(allow_rnn=allow_rnn):
        step = torch.compile(compiled_train_step(dev), backend="tpu", fullgraph=False)
        h0_dev = tuple(s.to("tpu") for s in state) if kind == "LSTM" else state[0].to("tpu")
        got = step(x.to("tpu"), h0_dev)
        explained = torch._dynamo.explain(compiled_train_step(copy.deepcopy(dev)))(x.to("tpu"), h0_dev)
    assert_close(got, want, **TOL)
    for (name, p_cpu), (_, p_dev) in zip(cpu.named_parameters(), dev.named_parameters()):
        assert_close(p_dev.grad, p_cpu.grad, **TOL)
    traced_rnn = [n for g in explained.graphs for n in g.graph.nodes if getattr(n.target, "__name__", "") == kind.lower()]
    if allow_rnn:
        # The whole layer (every step) is one node of the captured graph; only backward() breaks it.
        assert len(traced_rnn) == 1 and explained.graph_count == 2, (explained.graphs, explained.break_reasons)
        assert graph_runner.stats["captures"] >= 1
    else:
        # Dynamo gives the frame up, and it runs eagerly (the fused cells on the device).
        assert traced_rnn == [] and explained.graph_count == 0


@pytest.mark.usefixtures("fresh_dynamo")
def test_packed_sequence_under_torch_compile_runs_on_the_device():
    """Dynamo never traces pack_padded_sequence (PyTorch marks it skipped), so such a frame runs
    eagerly - still on the device, with no CPU fallback."""
    cpu, dev = make_module("LSTM", batch_first=True)
    lengths = torch.tensor([2, 4, 3])
    x = torch.randn(3, 4, I, generator=torch.Generator().manual_seed(12))

    def run(module, xs):
        packed = pack_padded_sequence(xs, lengths, batch_first=True, enforce_sorted=False)
        return pad_packed_sequence(module(packed)[0], batch_first=True)[0]

    with torch._dynamo.config.patch(allow_rnn=True), torch.no_grad():
        got = torch.compile(run, backend="tpu")(dev, x.to("tpu"))
        assert_close(got, run(cpu, x), **TOL)


def test_fused_eager_mode_matches_cpu():
    from torch_tpu.execution_mode import mode

    cpu, dev = make_module("GRU", num_layers=2, bidirectional=True)
    gen = torch.Generator().manual_seed(13)
    x = torch.randn(T, B, I, generator=gen)
    with mode("fused"):
        check_against_cpu("GRU", cpu, dev, x, initial_state("GRU", cpu, gen))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_autocast_runs_cells_in_bfloat16(kind):
    """Under torch.autocast("tpu") the gate products and cells run in bfloat16 (CUDA's policy);
    results stay within bfloat16 accuracy of the float32 CPU layer."""
    cpu, dev = make_module(kind)
    x = torch.randn(T, B, I, generator=torch.Generator().manual_seed(14))
    with torch.autocast("tpu"):
        out, _ = dev(x.to("tpu"))
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert all(torch.isfinite(p.grad.cpu()).all() for p in dev.parameters())
    assert_close(out.float(), cpu(x)[0].detach(), rtol=2e-2, atol=2e-2)
