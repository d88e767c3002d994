"""The reference models (Llama, Qwen3, ResNet-18, DLRM, minGPT, UNet) on tpu: forward output and
every parameter gradient match the CPU, and 20 AdamW steps track the CPU loss curve - with no
op falling back to the CPU."""

import copy

import pytest
import torch

import torch_tpu
from model_cases import cases, to_device

CASES = cases()


def make(name, seed=0):
    make_model, make_batch, loss_fn = CASES[name]
    torch.manual_seed(seed)
    model = make_model()
    batch = make_batch(torch.Generator().manual_seed(seed))
    return model, batch, loss_fn


@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_gradients_match_cpu(name):
    model, batch, loss_fn = make(name)
    tpu_model = copy.deepcopy(model).to("tpu")
    torch_tpu.reset_fallback_counts()
    cpu_loss = loss_fn(model, *batch)
    tpu_loss = loss_fn(tpu_model, *to_device(batch, "tpu"))
    cpu_loss.backward()
    tpu_loss.backward()
    assert torch_tpu.fallback_counts() == {}
    torch.testing.assert_close(tpu_loss.detach().cpu(), cpu_loss.detach(), rtol=1e-4, atol=1e-5)
    for (pname, p_cpu), p_tpu in zip(model.named_parameters(), tpu_model.parameters()):
        assert p_tpu.grad is not None and p_tpu.grad.device.type == "tpu", pname
        scale = p_cpu.grad.abs().max().item() + 1e-12
        torch.testing.assert_close(p_tpu.grad.cpu(), p_cpu.grad, rtol=1e-3, atol=2e-4 * scale, msg=pname)


# ResNet-18's BatchNorm makes some gradients pure rounding noise that AdamW normalises to +-lr,
# so its curve is compared with a looser tolerance.
CURVE_TOLERANCE = {"resnet18": 0.05}


@pytest.mark.parametrize("name", list(CASES))
def test_adamw_training_tracks_cpu(name):
    model, batch, loss_fn = make(name, seed=1)
    tpu_model = copy.deepcopy(model).to("tpu")
    tpu_batch = to_device(batch, "tpu")
    cpu_opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tpu_opt = torch.optim.AdamW(tpu_model.parameters(), lr=1e-3)
    torch_tpu.reset_fallback_counts()
    cpu_curve, tpu_curve = [], []
    for _ in range(20):
        for m, opt, b, curve in [(model, cpu_opt, batch, cpu_curve), (tpu_model, tpu_opt, tpu_batch, tpu_curve)]:
            opt.zero_grad()
            loss = loss_fn(m, *b)
            loss.backward()
            opt.step()
            curve.append(loss.item())
    assert torch_tpu.fallback_counts() == {}
    assert tpu_curve[-1] < tpu_curve[0]
    rtol = CURVE_TOLERANCE.get(name, 1e-3)
    torch.testing.assert_close(torch.tensor(tpu_curve), torch.tensor(cpu_curve), rtol=rtol, atol=rtol * 0.1)
