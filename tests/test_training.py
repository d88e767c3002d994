"""Autograd and SGD train a 2-layer MLP on tpu exactly as on the CPU, with no CPU fallback."""

import torch

import torch_tpu


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def train(model, x, y, steps=15):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_mlp_training_tracks_cpu(no_fallback):
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 16, generator=g), torch.randn(64, 4, generator=g)
    cpu_model = make_model()
    tpu_model = make_model().to("tpu")
    cpu_losses = train(cpu_model, x, y)
    tpu_losses = train(tpu_model, x.to("tpu"), y.to("tpu"))
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    assert tpu_losses[-1] < tpu_losses[0]
    for p_tpu, p_cpu in zip(tpu_model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5)


def test_gradients_match_cpu(no_fallback):
    x = torch.randn(8, 16)
    cpu_model, tpu_model = make_model(), make_model().to("tpu")
    cpu_model(x).sum().backward()
    tpu_model(x.to("tpu")).sum().backward()
    for p_tpu, p_cpu in zip(tpu_model.parameters(), cpu_model.parameters()):
        assert p_tpu.grad.device.type == "tpu"
        torch.testing.assert_close(p_tpu.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5)
    assert torch_tpu.fallback_counts() == {}
