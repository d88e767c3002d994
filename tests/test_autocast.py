"""torch.autocast("tpu"): matmuls and convolutions in bfloat16, softmax / norms / reductions /
losses in float32 - PyTorch's policy lists, as on CUDA."""

import pytest
import torch

from helpers import assert_close


def test_default_dtype_is_bfloat16():
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16


def test_policies():
    a, w = torch.randn(4, 8, device="tpu"), torch.randn(8, 6, device="tpu")
    img, k = torch.randn(1, 3, 8, 8, device="tpu"), torch.randn(4, 3, 3, 3, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert (a @ w).dtype == torch.bfloat16
        assert torch.nn.functional.linear(a, w.t()).dtype == torch.bfloat16
        assert torch.nn.functional.conv2d(img, k).dtype == torch.bfloat16
        y = a @ w
        assert torch.softmax(y, -1).dtype == torch.float32
        assert torch.nn.functional.layer_norm(y, (6,)).dtype == torch.float32
        assert y.sum().dtype == torch.float32
        assert torch.nn.functional.cross_entropy(y, torch.tensor([0, 1, 2, 3], device="tpu")).dtype == torch.float32
        assert (y.float() + y).dtype == torch.float32  # mixed-dtype ops promote


def test_values_match_the_policy_on_cpu():
    a, w = torch.randn(16, 32), torch.randn(32, 8)
    # The same casts done by hand on the CPU: matmul in bfloat16, softmax in float32.
    expected = torch.softmax((a.bfloat16() @ w.bfloat16()).float(), -1)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        got = torch.softmax(a.to("tpu") @ w.to("tpu"), -1)
    assert_close(got, expected, rtol=2e-2, atol=2e-2)


def test_training_step_under_autocast():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(32, 16, device="tpu"), torch.randint(0, 4, (32,), device="tpu")
    losses = []
    for _ in range(10):
        opt.zero_grad()
        with torch.autocast("tpu"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        assert model[0].weight.grad.dtype == torch.float32
    assert losses[-1] < losses[0]


def test_binary_cross_entropy_is_refused():
    p = torch.rand(4, device="tpu")
    with torch.autocast("tpu"), pytest.raises(RuntimeError, match="unsafe to autocast"):
        torch.nn.functional.binary_cross_entropy(p, p)
