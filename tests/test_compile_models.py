"""torch.compile(backend="tpu") on the reference models: compiled inference and a compiled
training step (forward, backward and an AdamW step inside the compiled function) match eager
CPU and eager tpu; a second call replays without recompiling; a new batch size compiles one
more program for that shape (static shapes) and is then replayed too."""

import copy

import pytest
import torch
import torch._dynamo

import models
import torch_tpu
from model_cases import cases, to_device
from torch_tpu.dynamo import graph_runner

CASES = cases()
EXAMPLE_BATCH = {
    "llama": models.Llama.example_batch,
    "qwen3": models.Qwen3.example_batch,
    "resnet18": models.resnet.ResNet.example_batch,
    "dlrm": models.DLRM.example_batch,
    "mingpt": models.GPT.example_batch,
    "unet": models.UNet.example_batch,
}
# Compiled programs let XLA fuse and reorder float arithmetic; ResNet-18's BatchNorm turns that
# rounding into visible noise (as in test_models.py and test_fused_eager.py).
LOSS_RTOL = {"resnet18": 0.05}
PARAM_ATOL = {"resnet18": 6e-3}


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def make(name, seed=0):
    make_model, make_batch, loss_fn = CASES[name]
    torch.manual_seed(seed)
    return make_model(), make_batch(torch.Generator().manual_seed(seed)), loss_fn


def compiles():
    s = torch.tpu.compilation_cache_stats()
    return graph_runner.stats["captures"], s["compiles"] + s["disk_loads"]


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_inference_matches_eager(name):
    model, _, _ = make(name)
    model.eval()
    inputs = EXAMPLE_BATCH[name](batch=4, generator=torch.Generator().manual_seed(1))[:-1]
    smaller = EXAMPLE_BATCH[name](batch=2, generator=torch.Generator().manual_seed(2))[:-1]
    tpu_model = copy.deepcopy(model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    torch_tpu.reset_fallback_counts()
    with torch.no_grad():
        expected = model(*inputs)
        eager_tpu = tpu_model(*to_device(inputs, "tpu"))
        out = compiled(*to_device(inputs, "tpu"))
        after_first = compiles()
        again = compiled(*to_device(inputs, "tpu"))
        assert compiles() == after_first, "the second call recompiled"
        assert graph_runner.stats["replays"] >= 1
        # A new batch size: one more capture for that shape, then replays.
        out_small = compiled(*to_device(smaller, "tpu"))
        assert graph_runner.stats["captures"] == after_first[0] + 1
        after_small = compiles()
        out_small_again = compiled(*to_device(smaller, "tpu"))
        assert compiles() == after_small
    assert torch_tpu.fallback_counts() == {}
    assert out.device.type == "tpu"
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out.cpu(), eager_tpu.cpu(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(again.cpu(), out.cpu(), rtol=0, atol=0)
    with torch.no_grad():
        expected_small = model(*smaller)
    torch.testing.assert_close(out_small.cpu(), expected_small, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out_small_again.cpu(), out_small.cpu(), rtol=0, atol=0)


def train_steps(model, batch, loss_fn, steps, compile_step, capturable):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=capturable)

    def step(*b):
        loss = loss_fn(model, *b)
        loss.backward()
        opt.step()
        return loss.detach()

    if compile_step:
        step = torch.compile(step, backend="tpu")
    losses, grads, counts = [], None, []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        losses.append(step(*batch).cpu())
        counts.append(compiles())
        if grads is None:  # the first step's: the parameters are still identical everywhere
            grads = [p.grad.detach().cpu() for p in model.parameters()]
    return torch.stack(losses), grads, [p.detach().cpu() for p in model.parameters()], counts


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_training_step_matches_eager(name):
    model, batch, loss_fn = make(name)
    tpu_batch = to_device(batch, "tpu")
    cpu = train_steps(copy.deepcopy(model), batch, loss_fn, 3, False, False)
    eager = train_steps(copy.deepcopy(model).to("tpu"), tpu_batch, loss_fn, 3, False, True)
    torch_tpu.reset_fallback_counts()
    donated = torch.tpu.compilation_cache_stats()["donated_buffers"]
    compiled = train_steps(copy.deepcopy(model).to("tpu"), tpu_batch, loss_fn, 3, True, True)
    assert torch_tpu.fallback_counts() == {}
    # Forward, backward and optimizer graphs are captured on the first call, then replayed.
    assert compiled[3][1] == compiled[3][0] == compiled[3][2], compiled[3]
    assert graph_runner.stats["replays"] >= 2 and graph_runner.stats["rerecorded_calls"] == 0
    # Parameters and optimizer state updated in place reuse their buffers.
    assert torch.tpu.compilation_cache_stats()["donated_buffers"] > donated
    rtol = LOSS_RTOL.get(name, 1e-4)
    torch.testing.assert_close(compiled[0], eager[0], rtol=rtol, atol=rtol * 0.1)
    torch.testing.assert_close(compiled[0], cpu[0], rtol=max(rtol, 1e-3), atol=1e-4)
    atol = PARAM_ATOL.get(name, 2e-4)
    for g, e, c in zip(compiled[1], eager[1], cpu[1]):
        scale = c.abs().max().item() + 1e-12
        torch.testing.assert_close(g, c, rtol=1e-3, atol=2e-4 * scale)
        torch.testing.assert_close(g, e, rtol=1e-3, atol=2e-4 * scale)
    for p, e, c in zip(compiled[2], eager[2], cpu[2]):
        torch.testing.assert_close(p, e, rtol=1e-3, atol=atol)
        torch.testing.assert_close(p, c, rtol=1e-3, atol=atol)
