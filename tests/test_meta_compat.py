"""Meta kernels for ops older torch versions lack (torch_tpu/_meta_compat.py)."""

import pytest
import torch

import torch_tpu  # noqa: F401
from torch_tpu import _meta_compat

_lib = torch.library.Library("tpu_meta_compat_test", "DEF")
_lib.define("scale2(Tensor x) -> Tensor")
_lib.impl("scale2", lambda x: x * 2, "CPU")


def _no_default_body(x):  # as the *_overrideable ops' default: a backend must register one
    raise RuntimeError("scale2 has no default body")


_lib.impl("scale2", _no_default_body, "CompositeExplicitAutograd")


def _meta_scale2(x):
    return torch.empty_like(x)


def test_registers_a_missing_meta_kernel_once():
    op = torch.ops.tpu_meta_compat_test.scale2
    kernels = {"scale2": _meta_scale2}
    # Without a Meta kernel the default body runs on meta tensors and cannot compute.
    with pytest.raises(RuntimeError, match="no default body"):
        op(torch.empty(3, device="meta"))
    assert _meta_compat.missing(kernels, "tpu_meta_compat_test") == ["scale2"]
    assert _meta_compat.install(kernels, "tpu_meta_compat_test") == ["scale2"]
    out = op(torch.empty(3, 5, device="meta"))
    assert out.device.type == "meta" and out.shape == (3, 5)
    assert _meta_compat.install(kernels, "tpu_meta_compat_test") == []  # nothing registered twice
    assert torch.equal(op(torch.arange(3.0)), torch.arange(3.0) * 2)  # other devices unchanged


def test_table_has_a_meta_kernel_for_every_entry_after_import():
    # import torch_tpu installed the table: on every supported torch each op now has one.
    assert _meta_compat.missing() == []


def test_sdpa_backward_shapes_match_the_inputs():
    q = torch.empty(2, 4, 16, 8, device="meta")
    k = v = torch.empty(2, 4, 12, 8, device="meta")
    grads = _meta_compat._sdpa_overrideable_backward(
        q, q, k, v, None, [True, True, True, False], q, torch.empty(2, 4, 16, device="meta"),
        None, None, 16, 12, 0.0, True, None, None)
    assert [g.shape for g in grads[:3]] == [q.shape, k.shape, v.shape] and grads[3] is None
    # ...and those of torch's own rule, where it has one (the kernel the dispatcher picks).
    ref = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
        q, q, k, v, None, [True, True, True, False], q, torch.empty(2, 4, 16, device="meta"),
        None, None, 16, 12, 0.0, True, torch.empty((), dtype=torch.long, device="meta"),
        torch.empty((), dtype=torch.long, device="meta"))
    assert [g.shape for g in ref[:3]] == [g.shape for g in grads[:3]]
