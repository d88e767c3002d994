"""Views alias their base: every view op of the op-library issue shares storage, and in-place
ops through views update the base and every other view, exactly as on the CPU."""

import pytest
import torch

from helpers import assert_close

VIEWS = {
    "view": lambda t: t.view(4, 6),
    "reshape_view": lambda t: t.reshape(2, 12),
    "transpose": lambda t: t.transpose(0, 1),
    "permute": lambda t: t.permute(1, 0),
    "t": lambda t: t.t(),
    "expand": lambda t: t[:1].expand(3, 8),
    "squeeze_unsqueeze": lambda t: t.unsqueeze(0).squeeze(0),
    "slice_step": lambda t: t[::2, 1::3],
    "select": lambda t: t[1],
    "narrow": lambda t: t.narrow(1, 2, 4),
    "diagonal": lambda t: t.diagonal(),
    "unfold": lambda t: t.unfold(1, 3, 2),
    "split": lambda t: t.split(3, dim=1)[1],
    "chunk": lambda t: t.chunk(2, dim=1)[1],
    "unbind": lambda t: t.unbind(0)[2],
    "as_strided": lambda t: t.as_strided((2, 3), (5, 2), 1),
    "view_dtype": lambda t: t.view(torch.int32),
}


def base():
    return torch.arange(24, dtype=torch.float32).reshape(3, 8)


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_shares_storage_and_values(name):
    t = base().to("tpu")
    v = VIEWS[name](t)
    assert v.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    assert torch.equal(v.cpu(), VIEWS[name](base()))


WRITABLE = [n for n in VIEWS if n not in ("expand", "unfold")]


@pytest.mark.parametrize("name", WRITABLE)
def test_inplace_through_view_updates_base(name):
    cpu, t = base(), base().to("tpu")
    sibling_cpu, sibling = cpu[:, 3], t[:, 3]
    v_cpu, v = VIEWS[name](cpu), VIEWS[name](t)
    if v.dtype == torch.int32:
        v_cpu.add_(7)
        v.add_(7)
    else:
        v_cpu.mul_(-2).add_(1)
        v.mul_(-2).add_(1)
    assert torch.equal(t.cpu(), cpu)
    assert torch.equal(sibling.cpu(), sibling_cpu)


def test_issue_examples():
    cpu, t = base(), base().to("tpu")
    for fn in [lambda x: x[:, 1].add_(1), lambda x: x.t().mul_(2), lambda x: x.diagonal().zero_()]:
        fn(cpu)
        fn(t)
    assert_close(t, cpu)


def test_overlapping_write_is_refused_like_cpu():
    t = torch.zeros(3, device="tpu")
    with pytest.raises(RuntimeError, match="more than one element"):
        t[:1].expand(4, 1).add_(1)


def test_out_variants_write_into_given_tensor():
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    out = torch.empty(4, 5, device="tpu")
    ptr = out.untyped_storage().data_ptr()
    for fn in [torch.mul, torch.maximum, torch.atan2]:
        fn(a.to("tpu"), b.to("tpu"), out=out)
        assert out.untyped_storage().data_ptr() == ptr
        assert_close(out, fn(a, b))
    small = torch.empty(0, device="tpu")
    torch.exp(a.to("tpu"), out=small)  # resized like on the CPU
    assert_close(small, torch.exp(a))


def test_version_counters_and_data():
    t = torch.ones(4, device="tpu", requires_grad=True)
    y = t * 2
    v = y._version
    y.add_(1)
    y[0] = 0
    assert y._version == v + 2
    w = torch.nn.Parameter(torch.zeros(3, device="tpu"))
    w.data = torch.arange(3.0, device="tpu")
    assert_close(w.detach(), torch.arange(3.0))
    (w * w).sum().backward()
    assert_close(w.grad, 2 * torch.arange(3.0))


def test_modified_saved_tensor_is_detected():
    a = torch.randn(3, device="tpu", requires_grad=True)
    b = a.sigmoid()
    b.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        b.sum().backward()
