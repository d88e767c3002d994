"""A one-element fill_ outside a recording (the seed ``ones_like(loss)`` of every ``backward()``) is
an upload of the value as the tensor's buffer, not a program launch; views, larger tensors and
Fused Eager's recording keep the program. A 0-dim one takes the device's cached buffer of that
value (exec/scalar_cache.h), shared by every such tensor until one is written. Values and dtype
conversions are checked against the same fill on the CPU."""

import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu.execution_mode import EagerMode, mode


def executions():
    return torch.tpu.compilation_cache_stats()["executions"]


@pytest.mark.parametrize("dtype,value", [(torch.float32, 3.5), (torch.int64, 2.7), (torch.bool, 2),
                                         (torch.bfloat16, 1.0 / 3), (torch.float16, -7)])
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_one_element_fill_launches_no_program(dtype, value, shape):
    t = torch.empty(shape, dtype=dtype, device="tpu")
    before = executions()
    t.fill_(value)
    assert executions() == before
    assert t.cpu().equal(torch.empty(shape, dtype=dtype).fill_(value))


def test_backward_seed_and_zero_launch_no_program():
    x = torch.randn(4, device="tpu", requires_grad=True)
    loss = (x * x).sum()
    before = executions()
    seed = torch.ones_like(loss)
    count = torch.zeros((), dtype=torch.int32, device="tpu")
    assert executions() == before
    loss.backward(seed)
    torch.testing.assert_close(x.grad.cpu(), 2 * x.detach().cpu())
    assert seed.item() == 1.0 and count.item() == 0


def test_a_one_element_view_and_larger_tensors_are_filled_by_the_program():
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = base.to("tpu")
    before = executions()
    t[1, 2].fill_(-1.0)  # a view inside a larger buffer: written in place by a program
    t2 = torch.empty(3, device="tpu").fill_(4.0)
    assert executions() == before + 2
    base[1, 2] = -1.0
    assert t.cpu().equal(base)
    assert t2.cpu().equal(torch.full((3,), 4.0))


def test_fused_eager_records_a_one_element_fill():
    with mode(EagerMode.FUSED):
        before = torch.tpu.compilation_cache_stats()["fused_ops_recorded"]
        t = torch.empty((), device="tpu").fill_(2.0)
        u = t * 3
        assert torch.tpu.compilation_cache_stats()["fused_ops_recorded"] >= before + 2
        assert u.item() == 6.0


def test_a_fill_while_another_thread_captures_on_the_device_keeps_the_program():
    import threading

    from torch_tpu import _C

    x = torch.arange(4, dtype=torch.float32)
    tx = x.to("tpu")
    recorded, filled, result = threading.Event(), threading.Event(), {}

    def capture():
        _C._capture_begin(True, 0)
        try:
            y = tx * 2
            recorded.set()
            filled.wait(timeout=60)
            z = y + 1
        finally:
            result["graph"] = _C._capture_end([tx], [z])
        result["z"] = z

    thread = threading.Thread(target=capture)
    thread.start()
    assert recorded.wait(timeout=60)
    t = torch.empty((), device="tpu")
    before = executions()
    t.fill_(5.0)  # a host write now could cut the other thread's capture: the program fills it
    assert executions() == before + 1
    filled.set()
    thread.join(timeout=60)
    assert result["graph"].replayable, result["graph"].reason
    assert result["z"].cpu().equal(x * 2 + 1)
    assert t.item() == 5.0


def test_zero_dim_fills_of_one_value_share_the_cached_buffer():
    from torch_tpu import _C

    a = torch.empty((), device="tpu").fill_(1.0)
    b = torch.ones_like(a)  # what autograd's backward seed is
    c = torch.empty((), device="tpu").fill_(2.0)
    d = torch.empty((), dtype=torch.float64, device="tpu").fill_(1.0)
    assert _C._test_buffer_address(a) == _C._test_buffer_address(b) != 0
    assert _C._test_buffer_address(c) != _C._test_buffer_address(a)
    assert _C._test_buffer_address(d) != _C._test_buffer_address(a)  # the cache is per dtype
    assert a.item() == b.item() == 1.0 and c.item() == 2.0 and d.item() == 1.0


def _bump(t):
    t.add_(1)
    return t


@pytest.mark.parametrize("write", ["in place", "copy_", "compiled in place", "fused in place"])
def test_a_write_to_a_shared_fill_changes_that_tensor_only(write):
    a = torch.empty((), device="tpu").fill_(1.0)
    b = torch.empty((), device="tpu").fill_(1.0)
    expected = torch.empty(()).fill_(1.0)
    if write == "in place":
        a.mul_(3).add_(1)
        expected.mul_(3).add_(1)
    elif write == "copy_":
        a.copy_(torch.tensor(5.0))
        expected.copy_(torch.tensor(5.0))
    elif write == "compiled in place":  # the replay donates the buffers of the graph's mutated inputs
        bump = torch.compile(_bump, backend="tpu")
        for _ in range(3):
            bump(a)
            _bump(expected)
    else:
        with mode(EagerMode.FUSED):
            a.add_(2)
        expected.add_(2)
    assert a.cpu().equal(expected)
    assert b.item() == 1.0
    assert torch.empty((), device="tpu").fill_(1.0).item() == 1.0  # the cached value itself
