"""Autograd on tpu: grad modes, detach, retain_grad, accumulation, hooks, clip_grad_norm_."""

import torch

from helpers import assert_close


def test_no_grad_and_inference_mode():
    w = torch.randn(3, 3, device="tpu", requires_grad=True)
    with torch.no_grad():
        y = w @ w
    assert not y.requires_grad
    with torch.inference_mode():
        z = w * 2
    assert z.is_inference() and not z.requires_grad
    assert_close(z, w.detach().cpu() * 2)


def test_detach_and_retain_grad():
    x = torch.randn(4, device="tpu", requires_grad=True)
    h = x * 3
    h.retain_grad()
    d = h.detach()
    assert not d.requires_grad and d.untyped_storage().data_ptr() == h.untyped_storage().data_ptr()
    (h ** 2).sum().backward()
    assert_close(h.grad, 2 * h.detach().cpu())
    assert_close(x.grad, 18 * x.detach().cpu())


def test_gradient_accumulation_and_hooks():
    x_cpu = torch.randn(5, requires_grad=True)
    x = x_cpu.detach().to("tpu").requires_grad_()
    seen = []
    x.register_hook(lambda g: seen.append(g.device.type))
    for _ in range(3):
        (x.sin() * x).sum().backward()
        (x_cpu.sin() * x_cpu).sum().backward()
    assert seen == ["tpu"] * 3
    assert_close(x.grad, x_cpu.grad)


def test_clip_grad_norm():
    torch.manual_seed(0)
    cpu = torch.nn.Linear(8, 4)
    tpu = torch.nn.Linear(8, 4).to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    x = torch.randn(16, 8) * 10
    cpu(x).pow(2).sum().backward()
    tpu(x.to("tpu")).pow(2).sum().backward()
    n_cpu = torch.nn.utils.clip_grad_norm_(cpu.parameters(), 1.0)
    n_tpu = torch.nn.utils.clip_grad_norm_(tpu.parameters(), 1.0)
    assert_close(n_tpu, n_cpu, rtol=1e-5, atol=1e-5)
    for p, q in zip(tpu.parameters(), cpu.parameters()):
        assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


def test_higher_order_gradients():
    x_cpu = torch.tensor([0.5, -1.5, 2.0], requires_grad=True)
    x = x_cpu.detach().to("tpu").requires_grad_()
    for v in (x, x_cpu):
        (g,) = torch.autograd.grad((v.tanh() ** 3).sum(), v, create_graph=True)
        g.sum().backward()
    assert_close(x.grad, x_cpu.grad, rtol=1e-5, atol=1e-6)
