"""Convolutions on the XLA CPU plugin run by ATen's CPU kernels from inside the program (host
kernel torch_tpu_conv, csrc/host_aten/conv_kernel.h): forward and every gradient equal the CPU's
(batches split over the cores, the weight's and bias's gradients summed over the blocks) in every
eager mode and in compiled code, the programs call the kernel only where it applies (large
float32/float64 convolutions without a precision override), and without it
(TORCH_TPU_HOST_KERNELS=0, other plugins) XLA's convolution gives the same results. The in-process
tests lower the size threshold to 0 so their small convolutions take the kernel."""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from helpers import assert_close, assert_each_call_is_one_program, check_host_kernel_switch
from torch_tpu.execution_mode import EagerMode, mode

KERNEL = "torch_tpu_conv"


@pytest.fixture(autouse=True)
def every_convolution_takes_the_kernel():
    old = torch_tpu._C._set_host_conv_min_macs(0)
    yield
    torch_tpu._C._set_host_conv_min_macs(old)

# name -> (conv function, input shape, weight shape, keyword arguments)
CASES = {
    "conv1d": (F.conv1d, (2, 3, 11), (4, 3, 3), dict(padding=1)),
    "conv2d": (F.conv2d, (2, 3, 9, 8), (5, 3, 3, 3), dict(padding=1)),
    # The kernel splits the batch over the cores: uneven blocks, and more images than cores.
    "conv2d batch 3": (F.conv2d, (3, 3, 9, 8), (5, 3, 3, 3), dict(padding=1)),
    "conv2d batch 7 stride": (F.conv2d, (7, 2, 6, 7), (3, 2, 3, 3), dict(stride=2)),
    "conv2d stride dilation": (F.conv2d, (2, 4, 13, 12), (6, 4, 3, 2), dict(stride=2, dilation=(2, 1), padding=(1, 0))),
    "conv2d groups": (F.conv2d, (2, 4, 8, 8), (6, 2, 3, 3), dict(groups=2, padding=1)),
    "conv2d depthwise": (F.conv2d, (2, 4, 8, 8), (4, 1, 3, 3), dict(groups=4, padding=1)),
    "conv3d": (F.conv3d, (1, 2, 5, 6, 5), (3, 2, 3, 3, 3), dict(padding=1, stride=(1, 2, 1))),
    "conv_transpose2d": (F.conv_transpose2d, (2, 4, 5, 6), (4, 3, 3, 3),
                         dict(stride=2, padding=1, output_padding=1)),
    "conv_transpose1d groups": (F.conv_transpose1d, (2, 4, 7), (4, 2, 3), dict(stride=2, groups=2)),
}


def _tensors(case, dtype, seed=0):
    _, x_shape, w_shape, kwargs = CASES[case]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(x_shape, generator=g, dtype=dtype)
    w = torch.randn(w_shape, generator=g, dtype=dtype)
    out_channels = w_shape[1] * kwargs.get("groups", 1) if "transpose" in case else w_shape[0]
    return x, w, torch.randn(out_channels, generator=g, dtype=dtype)


def _serial_blocks(case, x, w, b):
    fn, _, _, kwargs = CASES[case]
    n, cores = x.shape[0], os.cpu_count()
    count = max(1, min(n, cores))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return torch.cat([fn(x[n * i // count:n * (i + 1) // count], w, b, **kwargs) for i in range(count)])
    finally:
        torch.set_num_threads(threads)


def _forward_and_grads(case, x, w, b):
    fn, _, _, kwargs = CASES[case]
    x, w, b = (t.detach().requires_grad_(True) for t in (x, w, b))
    y = fn(x, w, b, **kwargs)
    (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype, device=y.device).view_as(y)).sum().backward()
    return y.detach(), x.grad, w.grad, b.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_forward_and_gradients_equal_the_cpu(case, dtype, no_fallback):
    x, w, b = _tensors(case, dtype)
    want = _forward_and_grads(case, x, w, b)
    got = _forward_and_grads(case, x.to("tpu"), w.to("tpu"), b.to("tpu"))
    for g, ref in zip(got, want):
        assert_close(g, ref)
    # The CPU's own kernel computed it, one serial convolution per block of the batch (one block
    # per core): the same bits as the CPU's serial kernel on those blocks (XLA's convolution, and
    # oneDNN's with another thread count, round differently).
    assert torch.equal(got[0].cpu(), _serial_blocks(case, x, w, b))


@pytest.mark.parametrize("eager", [EagerMode.STRICT, EagerMode.FUSED])
def test_the_blocks_run_on_xlas_intra_op_pool(eager, no_fallback):
    # The kernel's batch blocks go to the plugin's own intra-op pool (kernel_call.h, for_blocks):
    # its workers, idle between the program's fusions, take them instead of spinning beside a second
    # pool's threads. A batch of 7 images is one block per core; the results stay the CPU's.
    if os.cpu_count() < 2:
        pytest.skip("one core: the kernel runs a single block on the calling thread")
    x, w, b = _tensors("conv2d batch 7 stride", torch.float32)
    before = torch_tpu._C._host_kernel_block_counts()
    with mode(eager):
        got = _forward_and_grads("conv2d batch 7 stride", x.to("tpu"), w.to("tpu"), b.to("tpu"))
        torch.tpu.synchronize()
    after = torch_tpu._C._host_kernel_block_counts()
    assert after["xla_pool"] - before["xla_pool"] >= 2 * min(7, os.cpu_count()), (before, after)
    assert after["own_pool"] == before["own_pool"], (before, after)
    for g, ref in zip(got, _forward_and_grads("conv2d batch 7 stride", x, w, b)):
        assert_close(g, ref)


@pytest.mark.parametrize("eager", [EagerMode.STRICT, EagerMode.FUSED])
def test_a_convolution_and_its_backward_are_one_program_each(eager, no_fallback):
    x, w, b = (t.to("tpu") for t in _tensors("conv2d", torch.float32))
    grad = torch.ones(2, 5, 9, 8, device="tpu")
    assert_each_call_is_one_program([
        lambda: F.conv2d(x, w, b, padding=1),
        lambda: torch.ops.aten.convolution_backward(grad, x, w, [5], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                    [True, True, True]),
    ], eager)


def test_a_small_cnn_trains_the_same_in_fused_eager_and_compiled(no_fallback):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.GroupNorm(2, 8), torch.nn.SiLU(),
                                torch.nn.ConvTranspose2d(8, 4, 2, stride=2), torch.nn.Conv2d(4, 2, 1))
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))

    def step(m, opt, inp):
        opt.zero_grad()
        loss = m(inp).square().mean()
        loss.backward()
        opt.step()
        return loss.detach()

    def train(device, run):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        losses = [run(m, opt, x.to(device)) for _ in range(3)]
        return torch.stack(losses).cpu(), [p.detach().cpu() for p in m.parameters()]

    want_losses, want_params = train("cpu", step)
    with mode(EagerMode.FUSED):
        fused = train("tpu", step)
    compiled = train("tpu", torch.compile(step, backend="tpu"))
    for losses, params in (fused, compiled):
        torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
        for p, ref in zip(params, want_params):
            torch.testing.assert_close(p, ref, rtol=1e-5, atol=1e-6)


_DUMP_SCRIPT = textwrap.dedent("""
    import json, torch, torch_tpu
    import torch.nn.functional as F
    torch_tpu._C._set_host_conv_min_macs(0)
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(2, 3, 9, 9, generator=g), torch.randn(4, 3, 3, 3, generator=g), torch.randn(4, generator=g)
    xt, wt, bt = (t.to("tpu").requires_grad_(True) for t in (x, w, b))
    xc, wc, bc = (t.clone().requires_grad_(True) for t in (x, w, b))
    yt, yc = F.conv2d(xt, wt, bt, stride=2, padding=1), F.conv2d(xc, wc, bc, stride=2, padding=1)
    yt.sum().backward(); yc.sum().backward()
    diff = max((a.detach().cpu() - r.detach()).abs().max().item()
               for a, r in ((yt, yc), (xt.grad, xc.grad), (wt.grad, wc.grad), (bt.grad, bc.grad)))
    print("RESULT " + json.dumps({"available": "torch_tpu_conv" in torch_tpu._C._host_kernels(), "diff": diff}))
""")


def test_programs_call_the_kernel_when_it_is_registered(tmp_path):
    check_host_kernel_switch(tmp_path, _DUMP_SCRIPT, KERNEL, 1e-5)


def test_without_host_kernels_xla_convolves_with_the_same_results(tmp_path):
    check_host_kernel_switch(tmp_path, _DUMP_SCRIPT, KERNEL, 1e-4, enabled=False)


_XLA_CASES_SCRIPT = textwrap.dedent("""
    import json, torch, torch_tpu
    import torch.nn.functional as F
    torch_tpu._C._set_host_conv_min_macs(0)
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 3, 9, 9, generator=g), torch.randn(4, 3, 3, 3, generator=g)
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        y = F.conv2d(x.to("tpu"), w.to("tpu"), padding=1).cpu()
    diff = (y - F.conv2d(x, w, padding=1)).abs().max().item()
    h = F.conv2d(x.to("tpu", torch.bfloat16), w.to("tpu", torch.bfloat16), padding=1).cpu()
    diff = max(diff, (h.float() - F.conv2d(x.bfloat16(), w.bfloat16(), padding=1).float()).abs().max().item() / 10)
    print("RESULT " + json.dumps({"available": "torch_tpu_conv" in torch_tpu._C._host_kernels(), "diff": diff}))
""")


def test_precision_overrides_and_half_precision_keep_xlas_convolution(tmp_path):
    # torch.tpu.precision sets StableHLO's operand precision, which only XLA's convolution honours;
    # half-precision convolutions compute in float32 and round once (the lowering's policy). The
    # kernel is registered, and these programs must not call it.
    check_host_kernel_switch(tmp_path, _XLA_CASES_SCRIPT, KERNEL, 1e-3, calls=False)


_SIZE_SCRIPT = textwrap.dedent("""
    import json, torch, torch_tpu
    import torch.nn.functional as F
    n, c = (4, 64) if SIZE == "large" else (2, 4)  # 1.5e8 / 1.5e5 multiply-adds
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(n, c, 32, 32, generator=g), torch.randn(c, c, 3, 3, generator=g)
    diff = (F.conv2d(x.to("tpu"), w.to("tpu"), padding=1).cpu() - F.conv2d(x, w, padding=1)).abs().max().item()
    print("RESULT " + json.dumps({"available": "torch_tpu_conv" in torch_tpu._C._host_kernels(), "diff": diff}))
""")


@pytest.mark.parametrize("size", ["large", "small"])
def test_by_default_only_large_convolutions_take_the_kernel(tmp_path, size):
    script = _SIZE_SCRIPT.replace("SIZE", repr(size))
    check_host_kernel_switch(tmp_path, script, KERNEL, 1e-3, calls=size == "large")


def test_a_bad_size_threshold_is_a_clear_error():
    script = "import torch, torch_tpu; torch.nn.functional.conv2d(torch.ones(1, 1, 4, 4, device='tpu'), " \
             "torch.ones(1, 1, 3, 3, device='tpu')).cpu()"
    env = dict(os.environ, TORCH_TPU_HOST_CONV_MIN_MACS="lots")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "TORCH_TPU_HOST_CONV_MIN_MACS='lots' is not a number of multiply-adds. Fix:" in done.stderr
