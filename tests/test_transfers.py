"""Tensors in and out: .to/.cpu across devices, copy_ in every direction (views, dtype
conversion, broadcasting), non-blocking copies with pinned memory, .item() and printing."""

import pytest
import torch

from device_marks import needs_two_devices
from helpers import assert_close


@needs_two_devices
def test_roundtrip_and_second_device():
    x = torch.randn(5, 7)
    for dev in ["tpu", "tpu:0", "tpu:1"]:
        t = x.to(dev)
        assert t.device == torch.device(dev if ":" in dev else "tpu:0")
        assert torch.equal(t.cpu(), x)


@needs_two_devices
def test_cross_device_copy():
    x = torch.randn(4, 6)
    a = x.to("tpu:0")
    b = a.to("tpu:1")
    assert b.device.index == 1
    assert torch.equal(b.cpu(), x)
    c = torch.zeros(6, 4, device="tpu:0")
    c.copy_(b.t())  # a view on another device into a tpu:0 tensor
    assert torch.equal(c.cpu(), x.t())


@pytest.mark.parametrize("src_dtype,dst_dtype", [
    (torch.float32, torch.float16), (torch.float64, torch.int32), (torch.int64, torch.bfloat16),
    (torch.bool, torch.float32), (torch.float32, torch.bool), (torch.uint8, torch.int8),
])
def test_copy_converts_dtype_in_every_direction(src_dtype, dst_dtype):
    x = (torch.randn(3, 4) * 5).to(src_dtype)
    expected = torch.empty(3, 4, dtype=dst_dtype).copy_(x)
    # host -> device
    d = torch.empty(3, 4, dtype=dst_dtype, device="tpu")
    d.copy_(x)
    assert_close(d, expected)
    # device -> device
    d2 = torch.empty(3, 4, dtype=dst_dtype, device="tpu")
    d2.copy_(x.to("tpu"))
    assert_close(d2, expected)
    # device -> host
    h = torch.empty(3, 4, dtype=dst_dtype)
    h.copy_(x.to("tpu"))
    assert torch.equal(h, expected)
    assert_close(x.to("tpu").to(dst_dtype), x.to(dst_dtype))


def test_copy_into_views_and_broadcast():
    base_cpu = torch.arange(24.0).reshape(4, 6)
    base = base_cpu.to("tpu")
    base[1:3, ::2].copy_(torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]]))
    base_cpu[1:3, ::2].copy_(torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]]))
    assert_close(base, base_cpu)
    base[:, 0].copy_(torch.tensor(9.0))  # broadcast a 0-dim source
    base_cpu[:, 0].copy_(torch.tensor(9.0))
    assert_close(base, base_cpu)
    row = torch.tensor([7.0, 8.0, 9.0, 10.0, 11.0, 12.0]).to("tpu")
    base[2:].copy_(row)  # broadcast a tpu source over rows
    base_cpu[2:].copy_(row.cpu())
    assert_close(base, base_cpu)
    host = torch.zeros(6, 4)
    host.t().copy_(base)  # device -> non-contiguous host view
    assert torch.equal(host.t(), base_cpu)


def test_non_contiguous_sources_to_host():
    x = torch.randn(5, 8)
    t = x.to("tpu")
    for view in [lambda v: v.t(), lambda v: v[::2, 1::3], lambda v: v[3], lambda v: v.diagonal(),
                 lambda v: v.unsqueeze(0).expand(3, 5, 8)]:
        assert torch.equal(view(t).cpu(), view(x))


def test_pin_memory_and_non_blocking_copies():
    x = torch.randn(64, 64)
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned()
    t = p.to("tpu", non_blocking=True)
    back = torch.empty(64, 64).pin_memory()
    back.copy_(t * 2, non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(back, x * 2)
    t2 = x.to("tpu", non_blocking=True)  # pageable source: copied synchronously
    assert torch.equal(t2.cpu(), x)


def test_item_and_local_scalars():
    assert torch.tensor(3.5).to("tpu").item() == 3.5
    assert torch.tensor([7], dtype=torch.int64).to("tpu").item() == 7
    assert torch.tensor(True).to("tpu").item() is True
    t = torch.arange(10, device="tpu")
    assert t[4].item() == 4
    assert int(t.sum()) == 45
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        t.item()


def test_print_shows_device_and_values():
    t = torch.tensor([[1.5, -2.0], [3.0, 4.25]]).to("tpu")
    text = str(t)
    assert "device='tpu:0'" in text
    assert "1.5000" in text and "4.2500" in text
    if torch.tpu.device_count() > 1:
        assert "device='tpu:1'" in repr(torch.tensor([1, 2]).to("tpu:1"))


def test_empty_and_zero_size_tensors():
    e = torch.empty(0, 3, device="tpu")
    assert e.cpu().shape == (0, 3)
    z = torch.zeros(0, device="tpu") + 1
    assert z.shape == (0,)
