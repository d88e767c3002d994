"""nn.CTCLoss / F.ctc_loss on the tpu device (aten::_ctc_loss and _ctc_loss_backward lowered to
StableHLO while loops), compared with PyTorch's CPU kernel on the same inputs, in strict mode
(no CPU fallback)."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401
from tests.helpers import assert_close

T, N, C, S = 7, 3, 5, 4


def make_case(dtype, blank=0, seed=0):
    """log_probs, padded targets (with a repeated label, so the skip rule matters), lengths.
    Sample 2 has a target too long for its input (infinite loss)."""
    g = torch.Generator().manual_seed(seed)
    log_probs = torch.randn(T, N, C, generator=g, dtype=dtype).log_softmax(2)
    labels = [c for c in range(C) if c != blank]
    targets = torch.tensor(labels, dtype=torch.long)[torch.randint(0, len(labels), (N, S), generator=g)]
    targets[0, 1] = targets[0, 0]
    input_lengths = [T, 5, 2]
    target_lengths = [S, 2, 3]
    return log_probs, targets, input_lengths, target_lengths


def concatenated(targets, target_lengths):
    return torch.cat([targets[i, :n] for i, n in enumerate(target_lengths)])


def loss_and_grad(log_probs, targets, il, tl, device, **kw):
    x = log_probs.detach().to(device).requires_grad_()
    loss = F.ctc_loss(x, targets.to(device), il, tl, **kw)
    # a non-uniform upstream gradient checks the per-sample grad scaling
    weight = torch.arange(1, loss.numel() + 1, dtype=loss.dtype).reshape(loss.shape).to(device)
    (loss * weight).sum().backward()
    return loss, x.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
def test_ctc_loss_matches_cpu(strict_no_fallback, dtype, reduction, zero_infinity, layout):
    log_probs, targets, il, tl = make_case(dtype)
    if layout == "concatenated":
        targets = concatenated(targets, tl)
    kw = dict(reduction=reduction, zero_infinity=zero_infinity)
    loss_tpu, grad_tpu = loss_and_grad(log_probs, targets, il, tl, "tpu", **kw)
    loss_cpu, grad_cpu = loss_and_grad(log_probs, targets, il, tl, "cpu", **kw)
    assert_close(loss_tpu, loss_cpu)
    assert_close(grad_tpu, grad_cpu)
    if reduction == "none" and not zero_infinity:
        assert torch.isinf(loss_cpu[2])  # the infeasible sample really is covered


@pytest.mark.parametrize("blank", [2, C - 1])
def test_blank_index_and_tensor_lengths(strict_no_fallback, blank):
    log_probs, targets, il, tl = make_case(torch.float32, blank=blank, seed=1)
    il_t, tl_t = torch.tensor(il), torch.tensor(tl, dtype=torch.int32)
    loss_fn = torch.nn.CTCLoss(blank=blank, reduction="sum", zero_infinity=True)
    results = {}
    for device in ("tpu", "cpu"):
        x = log_probs.to(device).requires_grad_()
        loss = loss_fn(x, targets.to(device), il_t.to(device), tl_t.to(device))
        loss.backward()
        results[device] = (loss, x.grad)
    assert_close(results["tpu"][0], results["cpu"][0])
    assert_close(results["tpu"][1], results["cpu"][1])


def test_aten_overloads_and_log_alpha(strict_no_fallback):
    """_ctc_loss.Tensor / _ctc_loss_backward.Tensor directly; log_alpha equals the CPU's where
    the CPU kernel defines it (t < input length, s < 2 * target length + 1)."""
    log_probs, targets, il, tl = make_case(torch.float64, seed=2)
    il_t, tl_t = torch.tensor(il), torch.tensor(tl)
    out = {}
    for device in ("tpu", "cpu"):
        args = (log_probs.to(device), targets.to(device), il_t.to(device), tl_t.to(device))
        nll, log_alpha = torch.ops.aten._ctc_loss.Tensor(*args, 1, False)
        grad_out = torch.linspace(0.5, 1.5, N, dtype=torch.float64).to(device)
        grad = torch.ops.aten._ctc_loss_backward.Tensor(grad_out, *args, nll, log_alpha, 1, True)
        out[device] = (nll, log_alpha, grad)
    assert_close(out["tpu"][0], out["cpu"][0])
    assert_close(out["tpu"][2], out["cpu"][2])
    assert out["tpu"][1].shape == out["cpu"][1].shape
    for b in range(N):
        assert_close(out["tpu"][1][b, : il[b], : 2 * tl[b] + 1], out["cpu"][1][b, : il[b], : 2 * tl[b] + 1])


def test_unbatched_and_empty_lengths(strict_no_fallback):
    """2-D log_probs (no batch dim), and a batch with an empty input and an empty target."""
    log_probs, targets, _, _ = make_case(torch.float32, seed=3)
    single = {}
    for device in ("tpu", "cpu"):
        x = log_probs[:, 0].to(device).requires_grad_()
        loss = F.ctc_loss(x, targets[0].to(device), [T], [S], reduction="sum")
        loss.backward()
        single[device] = (loss, x.grad)
    assert_close(single["tpu"][0], single["cpu"][0])
    assert_close(single["tpu"][1], single["cpu"][1])
    il, tl = [0, 0, 4], [0, 2, 0]
    loss_tpu, grad_tpu = loss_and_grad(log_probs, targets, il, tl, "tpu", reduction="none")
    loss_cpu, grad_cpu = loss_and_grad(log_probs, targets, il, tl, "cpu", reduction="none")
    assert_close(loss_tpu, loss_cpu)
    assert_close(grad_tpu, grad_cpu)


def test_same_shape_new_lengths_reuses_program(strict_no_fallback):
    """Lengths are run-time data: a second batch of the same shape with other lengths is exact too."""
    log_probs, targets, _, _ = make_case(torch.float32, seed=4)
    for il, tl in ([[7, 6, 5], [1, 2, 3]], [[3, 7, 4], [4, 1, 2]]):
        loss_tpu, grad_tpu = loss_and_grad(log_probs, targets, il, tl, "tpu", reduction="mean")
        loss_cpu, grad_cpu = loss_and_grad(log_probs, targets, il, tl, "cpu", reduction="mean")
        assert_close(loss_tpu, loss_cpu)
        assert_close(grad_tpu, grad_cpu)


def test_bad_input_raises():
    log_probs, targets, il, tl = make_case(torch.float32)
    lp, tg = log_probs.to("tpu"), targets.to("tpu")
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        F.ctc_loss(lp, tg, il, tl, blank=C)
    with pytest.raises(RuntimeError, match="input_lengths"):
        F.ctc_loss(lp, tg, [T + 1, 1, 1], tl)
    with pytest.raises(RuntimeError, match="size at least"):
        F.ctc_loss(lp, tg, il, [S + 1, 1, 1])
    with pytest.raises(RuntimeError, match="not implemented for 'Half'"):
        torch.ops.aten._ctc_loss(lp.half(), tg, il, tl)
