"""LSTM layers on the XLA CPU plugin run by oneDNN's LSTM (ATen's CPU kernel) from inside the
program (host kernel torch_tpu_lstm, csrc/host_aten/lstm_kernel.h): forward, final states and every
gradient equal the CPU's (the batch split into one serial block per core, the weights' gradients
summed over the blocks) in Strict, Fused Eager and compiled code; the backward follows the forward
through its workspace; by default only large layers take the kernel, and without it
(TORCH_TPU_HOST_KERNELS=0) XLA's loop gives the same results. The in-process tests lower the size
threshold to 0 so their small layers take the kernel."""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu
from helpers import assert_close, check_host_kernel_switch
from torch_tpu.execution_mode import EagerMode, mode

KERNEL = "torch_tpu_lstm"
TOL = dict(rtol=2e-5, atol=2e-5)
pytestmark = pytest.mark.usefixtures("strict_no_fallback")


@pytest.fixture
def every_layer_takes_the_kernel():
    if KERNEL not in torch_tpu._C._host_kernels():
        pytest.skip("this PyTorch build has no oneDNN (the kernel is registered only with it)")
    old = torch_tpu._C._set_host_lstm_min_macs(0)
    yield
    torch_tpu._C._set_host_lstm_min_macs(old)


def _layer_op(x, state, module, reverse=False):
    """aten::mkldnn_rnn_layer for the module's first layer (direction `reverse`), as nn.LSTM calls it."""
    sfx = "_reverse" if reverse else ""
    p = [getattr(module, f"{n}_l0{sfx}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    return torch.ops.aten.mkldnn_rnn_layer(x, *p, state[0], state[1], reverse, [], 2, module.hidden_size, 1, True,
                                           False, False, True)


CASES = {
    "plain": dict(),
    "two layers, batch first": dict(num_layers=2, batch_first=True),
    "bidirectional, no bias": dict(bidirectional=True, bias=False),
}


def _run(module, x, state, weights):
    out, (h, c) = module(x, state)
    ((out * weights).sum() + (h * h).sum() + 2 * c.sum()).backward()
    return out.detach(), h.detach(), c.detach()


@pytest.mark.parametrize("eager", [EagerMode.STRICT, EagerMode.FUSED])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("batch", [3, 8])  # uneven blocks over the cores, and more rows than cores
def test_forward_and_gradients_equal_the_cpu(every_layer_takes_the_kernel, case, batch, eager):
    kwargs = CASES[case]
    torch.manual_seed(0)
    cpu = torch.nn.LSTM(6, 5, **kwargs)
    dev = copy.deepcopy(cpu).to("tpu")
    g = torch.Generator().manual_seed(1)
    t = 7
    x = torch.randn((batch, t, 6) if kwargs.get("batch_first") else (t, batch, 6), generator=g)
    layers = cpu.num_layers * (2 if cpu.bidirectional else 1)
    state = [torch.randn(layers, batch, 5, generator=g) for _ in range(2)]
    results = {}
    for name, module in (("cpu", cpu), ("tpu", dev)):
        xs = x.detach().to(name).requires_grad_()
        ss = [s.detach().to(name).requires_grad_() for s in state]
        width = 5 * (2 if cpu.bidirectional else 1)
        out_shape = (batch, t, width) if kwargs.get("batch_first") else (t, batch, width)
        weights = torch.linspace(-1, 1, torch.Size(out_shape).numel()).reshape(out_shape).to(name)
        with mode(eager if name == "tpu" else EagerMode.STRICT):
            outs = _run(module, xs, tuple(ss), weights)
        results[name] = outs + (xs.grad, ss[0].grad, ss[1].grad) + tuple(p.grad for p in module.parameters())
    for got, want in zip(results["tpu"], results["cpu"]):
        assert_close(got, want, **TOL)


def test_the_layer_takes_the_kernel_and_its_backward_follows(every_layer_takes_the_kernel):
    # The kernel's forward returns oneDNN's workspace (bytes); XLA's returns [T, B, 5H] floats. The
    # backward runs the kernel when it is handed the kernel's workspace, and both halves run their
    # batch blocks on XLA's intra-op pool.
    torch.manual_seed(0)
    cpu = torch.nn.LSTM(4, 3)
    dev = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(5, 4, 4)
    state = (torch.zeros(4, 3), torch.zeros(4, 3))
    before = torch_tpu._C._host_kernel_block_counts()
    y, h, c, ws = _layer_op(x.to("tpu"), [s.to("tpu") for s in state], dev)
    assert ws.dtype == torch.uint8 and ws.dim() == 1
    grads = torch.ops.aten.mkldnn_rnn_layer_backward(
        x.to("tpu"), dev.weight_ih_l0, dev.weight_hh_l0, dev.bias_ih_l0, dev.bias_hh_l0, state[0].to("tpu"),
        state[1].to("tpu"), y, h, c, torch.ones_like(y), None, None, False, 2, 3, 1, True, True, False, [], False, ws)
    torch.tpu.synchronize()
    after = torch_tpu._C._host_kernel_block_counts()
    if os.cpu_count() >= 2:
        assert after["xla_pool"] - before["xla_pool"] >= 2 * min(4, os.cpu_count()), (before, after)
    want = _layer_op(x, state, cpu)
    assert_close(y, want[0], **TOL)
    want_grads = torch.ops.aten.mkldnn_rnn_layer_backward(
        x, cpu.weight_ih_l0, cpu.weight_hh_l0, cpu.bias_ih_l0, cpu.bias_hh_l0, state[0], state[1], want[0], want[1],
        want[2], torch.ones_like(want[0]), None, None, False, 2, 3, 1, True, True, False, [], False, want[3])
    for got, ref in zip(grads, want_grads):
        assert_close(got, ref, **TOL)

    old = torch_tpu._C._set_host_lstm_min_macs(float("inf"))
    try:
        ws_xla = _layer_op(x.to("tpu"), [s.to("tpu") for s in state], dev)[3]
    finally:
        torch_tpu._C._set_host_lstm_min_macs(old)
    assert ws_xla.dtype == torch.float32 and ws_xla.shape == (5, 4, 15)


def test_an_empty_batch_keeps_xlas_loop(every_layer_takes_the_kernel):
    # oneDNN cannot execute a layer without rows; XLA's loop returns the empty results the CPU does.
    cpu = torch.nn.LSTM(4, 3)
    dev = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(5, 0, 4)
    got, (h, c) = dev(x.to("tpu"))
    want, (h_cpu, c_cpu) = cpu(x)
    assert got.shape == want.shape and h.shape == h_cpu.shape and c.shape == c_cpu.shape
    assert got.device.type == "tpu" and got.cpu().numel() == 0


def test_a_workspace_of_another_layer_is_a_clear_error(every_layer_takes_the_kernel):
    torch.manual_seed(0)
    dev = torch.nn.LSTM(4, 3).to("tpu")
    x = torch.randn(5, 4, 4, device="tpu")
    state = [torch.zeros(4, 3, device="tpu")] * 2
    y, h, c, ws = _layer_op(x, state, dev)
    with pytest.raises(RuntimeError, match="workspace has .* bytes, this layer needs"):
        torch.ops.aten.mkldnn_rnn_layer_backward(
            x, dev.weight_ih_l0, dev.weight_hh_l0, dev.bias_ih_l0, dev.bias_hh_l0, state[0], state[1], y, h, c,
            torch.ones_like(y), None, None, False, 2, 3, 1, True, True, False, [], False, ws[:-1].clone())[0].cpu()
    with pytest.raises(RuntimeError, match="was not made by the tpu forward of this layer"):
        torch.ops.aten.mkldnn_rnn_layer_backward(
            x, dev.weight_ih_l0, dev.weight_hh_l0, dev.bias_ih_l0, dev.bias_hh_l0, state[0], state[1], y, h, c,
            torch.ones_like(y), None, None, False, 2, 3, 1, True, True, False, [], False, ws.view(2, -1))


def test_an_lstm_classifier_trains_the_same_compiled(every_layer_takes_the_kernel):
    torch.manual_seed(0)

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(20, 8)
            self.lstm = torch.nn.LSTM(8, 8, 2, batch_first=True)
            self.head = torch.nn.Linear(8, 3)

        def forward(self, tokens):
            return self.head(self.lstm(self.emb(tokens))[0][:, -1])

    model = Classifier()
    tokens = torch.randint(0, 20, (4, 6), generator=torch.Generator().manual_seed(1))
    target = torch.tensor([0, 1, 2, 1])

    def step(m, opt, inp, tgt):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(inp), tgt)
        loss.backward()
        opt.step()
        return loss.detach()

    def train(device, run):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, capturable=device == "tpu")
        losses = [run(m, opt, tokens.to(device), target.to(device)) for _ in range(3)]
        return torch.stack(losses).cpu(), [p.detach().cpu() for p in m.parameters()]

    want_losses, want_params = train("cpu", step)
    losses, params = train("tpu", torch.compile(step, backend="tpu"))
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
    for p, ref in zip(params, want_params):
        torch.testing.assert_close(p, ref, rtol=1e-5, atol=1e-5)


_SWITCH_SCRIPT = textwrap.dedent("""
    import json, torch, torch_tpu
    torch_tpu._C._set_host_lstm_min_macs(0)
    torch.manual_seed(0)
    cpu = torch.nn.LSTM(6, 5, 2, bidirectional=True)
    dev = torch.nn.LSTM(6, 5, 2, bidirectional=True).to("tpu"); dev.load_state_dict(cpu.state_dict())
    x = torch.randn(7, 3, 6)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    yc, yt = cpu(xc)[0], dev(xt)[0]
    yc.square().sum().backward(); yt.square().sum().backward()
    diff = max((a.detach().cpu() - r.detach()).abs().max().item() for a, r in
               [(yt, yc), (xt.grad, xc.grad)] + [(p.grad, q.grad) for p, q in zip(dev.parameters(), cpu.parameters())])
    print("RESULT " + json.dumps({"available": "torch_tpu_lstm" in torch_tpu._C._host_kernels(), "diff": diff}))
""")


def test_programs_call_the_kernel_when_it_is_registered(tmp_path):
    check_host_kernel_switch(tmp_path, _SWITCH_SCRIPT, KERNEL, 1e-4)


def test_without_host_kernels_xlas_loop_gives_the_same_results(tmp_path):
    check_host_kernel_switch(tmp_path, _SWITCH_SCRIPT, KERNEL, 1e-4, enabled=False)


_SIZE_SCRIPT = textwrap.dedent("""
    import json, torch, torch_tpu
    t, b, h = (64, 32, 256) if SIZE == "large" else (32, 16, 256)  # 1.1e9 / 2.7e8 multiply-adds
    torch.manual_seed(0)
    cpu = torch.nn.LSTM(h, h)
    dev = torch.nn.LSTM(h, h).to("tpu"); dev.load_state_dict(cpu.state_dict())
    x = torch.randn(t, b, h)
    with torch.no_grad():
        diff = (dev(x.to("tpu"))[0].cpu() - cpu(x)[0]).abs().max().item()
    print("RESULT " + json.dumps({"available": "torch_tpu_lstm" in torch_tpu._C._host_kernels(), "diff": diff}))
""")


@pytest.mark.parametrize("size", ["large", "small"])
def test_by_default_only_large_layers_with_enough_rows_a_core_take_the_kernel(tmp_path, size):
    # Both are above the default 2e8 multiply-adds; the small one has 16 rows, split over the cores
    # into blocks of fewer than 16 (on one core it is a block of 16 and takes the kernel).
    script = _SIZE_SCRIPT.replace("SIZE", repr(size))
    calls = size == "large" or os.cpu_count() == 1
    check_host_kernel_switch(tmp_path, script, KERNEL, 1e-4, calls=calls)


def test_a_bad_size_threshold_is_a_clear_error():
    script = "import torch, torch_tpu; m = torch.nn.LSTM(4, 4).to('tpu'); m(torch.ones(3, 2, 4, device='tpu'))[0].cpu()"
    env = dict(os.environ, TORCH_TPU_HOST_LSTM_MIN_MACS="lots")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "TORCH_TPU_HOST_LSTM_MIN_MACS='lots' is not a number of multiply-adds. Fix:" in done.stderr
