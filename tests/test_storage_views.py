"""The storage model: views share their base's storage, writes through any view update the
base and every other view, in-place ops bump version counters, storages resize."""

import torch

from helpers import assert_close


def base_pair():
    x = torch.arange(20.0).reshape(4, 5)
    return x.clone(), x.to("tpu")


def test_views_share_storage():
    _, t = base_pair()
    for v in [t[1], t[:, 2], t.t(), t.view(20), t.reshape(2, 10), t[1:3, ::2], t.unsqueeze(0),
              t.expand(3, 4, 5), t.diagonal(), t.narrow(1, 1, 3), t.unfold(1, 2, 1)]:
        assert v.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
        assert v._base is t or v._base is t._base or v._base is None


def test_inplace_through_views_updates_base_and_siblings():
    x, t = base_pair()
    col, col_cpu = t[:, 1], x[:, 1]
    row, row_cpu = t[2], x[2]
    col.add_(1)
    col_cpu.add_(1)
    t.t().mul_(2)
    x.t().mul_(2)
    t.diagonal().zero_()
    x.diagonal().zero_()
    assert_close(t, x)
    assert_close(row, row_cpu)  # a sibling view sees every write
    assert_close(col, col_cpu)


def test_step_slices_and_negative_layouts():
    x, t = base_pair()
    t[::2, 1::2] = -1.0
    x[::2, 1::2] = -1.0
    t[3, :] += torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).to("tpu")
    x[3, :] += torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    assert_close(t, x)


def test_out_argument_writes_into_given_tensor():
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    out = torch.empty(3, 4, device="tpu")
    ptr = out.untyped_storage().data_ptr()
    torch.add(a.to("tpu"), b.to("tpu"), out=out)
    assert out.untyped_storage().data_ptr() == ptr
    assert_close(out, a + b)
    big = torch.empty(6, 4, device="tpu")
    torch.mul(a.to("tpu"), b.to("tpu"), out=big[::2])  # out= into a strided view
    assert_close(big[::2], a * b)


def test_version_counter_and_data():
    t = torch.ones(3, device="tpu")
    v0 = t._version
    t.add_(1)
    t[0] = 5
    assert t._version == v0 + 2
    p = torch.nn.Parameter(torch.zeros(3, device="tpu"))
    p.data = torch.full((3,), 2.0, device="tpu")
    assert_close(p.data, torch.full((3,), 2.0))
    p.data.mul_(3)
    assert_close(p.detach(), torch.full((3,), 6.0))


def test_clone_is_independent():
    x, t = base_pair()
    c = t.clone()
    c.add_(100)
    assert_close(t, x)
    assert_close(c, x + 100)


def test_resize_and_set():
    t = torch.arange(6.0).to("tpu")
    t.resize_(2, 3)
    assert_close(t, torch.arange(6.0).reshape(2, 3))
    t.resize_(4, 3)  # grows the storage, keeping the old values
    assert t.untyped_storage().nbytes() >= 48
    assert_close(t[:2], torch.arange(6.0).reshape(2, 3))
    s = torch.empty(0, device="tpu")
    s.set_(t.untyped_storage(), 3, (3,), (1,))
    assert_close(s, torch.arange(3.0, 6.0))


def test_storage_resize_to_zero_and_back():
    t = torch.ones(8, device="tpu")
    st = t.untyped_storage()
    st.resize_(0)
    assert st.nbytes() == 0
    st.resize_(32)
    t.fill_(2.0)
    assert_close(t, torch.full((8,), 2.0))


def test_view_dtype_reinterprets_bytes():
    x = torch.tensor([1.0, -2.5, 3.25, 0.0])
    t = x.to("tpu")
    assert torch.equal(t.view(torch.int32).cpu(), x.view(torch.int32))
    assert torch.equal(t.view(torch.uint8).cpu(), x.view(torch.uint8))
    t.view(torch.int32)[1] = 0
    x.view(torch.int32)[1] = 0
    assert_close(t, x)
