"""grid_sample (2D/3D, every mode/padding/align_corners) and antialiased bilinear interpolate run
on the tpu without CPU fallback and match the CPU, forward and backward."""
import itertools

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from helpers import assert_close

_PADDINGS = ["zeros", "border", "reflection"]


def _inputs(dims, seed, dtype=torch.float32):
    torch.manual_seed(seed)
    spatial = [5, 4, 3][:dims]
    x = torch.randn(2, 3, *spatial, dtype=dtype)
    # Grid reaches past [-1, 1] so every padding rule is exercised.
    grid = (torch.rand(2, *[4, 3, 2][:dims], dims) * 2.6 - 1.3).to(dtype)
    return x, grid


@pytest.mark.parametrize("dims,mode", [(2, "bilinear"), (2, "nearest"), (2, "bicubic"), (3, "bilinear"), (3, "nearest")])
def test_grid_sample_forward_matches_cpu(dims, mode, strict_no_fallback):
    x, grid = _inputs(dims, seed=0)
    for padding, align in itertools.product(_PADDINGS, [False, True]):
        got = F.grid_sample(x.to("tpu"), grid.to("tpu"), mode=mode, padding_mode=padding, align_corners=align)
        assert_close(got, F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align))


def test_grid_sample_bfloat16_matches_cpu(strict_no_fallback):
    x, grid = _inputs(2, seed=1, dtype=torch.bfloat16)
    got = F.grid_sample(x.to("tpu"), grid.to("tpu"), mode="bilinear", padding_mode="border", align_corners=False)
    want = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    assert_close(got, want, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("dims,mode", [(2, "bilinear"), (2, "nearest"), (2, "bicubic"), (3, "bilinear")])
@pytest.mark.parametrize("padding", _PADDINGS)
def test_grid_sample_backward_matches_cpu(dims, mode, padding, no_fallback):
    x, grid = _inputs(dims, seed=2)
    x_cpu, g_cpu = x.clone().requires_grad_(), grid.clone().requires_grad_()
    x_tpu, g_tpu = x.to("tpu").requires_grad_(), grid.to("tpu").requires_grad_()
    F.grid_sample(x_cpu, g_cpu, mode=mode, padding_mode=padding, align_corners=True).pow(2).sum().backward()
    F.grid_sample(x_tpu, g_tpu, mode=mode, padding_mode=padding, align_corners=True).pow(2).sum().backward()
    assert_close(x_tpu.grad, x_cpu.grad, rtol=1e-4, atol=1e-4)
    # Nearest has a zero (not missing) grid gradient, as on the CPU.
    assert_close(g_tpu.grad, g_cpu.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size,align", [((4, 3), False), ((4, 3), True), ((12, 11), False), ((5, 14), True)])
def test_antialiased_bilinear_matches_cpu(size, align, strict_no_fallback):
    torch.manual_seed(3)
    x = torch.randn(2, 3, 9, 7)
    got = F.interpolate(x.to("tpu"), size=size, mode="bilinear", antialias=True, align_corners=align)
    assert_close(got, F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=align))


def test_antialiased_bilinear_scale_factor_and_backward(no_fallback):
    torch.manual_seed(4)
    x = torch.randn(1, 2, 10, 8)
    x_cpu, x_tpu = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    kw = dict(scale_factor=0.37, mode="bilinear", antialias=True, align_corners=False)
    out_cpu, out_tpu = F.interpolate(x_cpu, **kw), F.interpolate(x_tpu, **kw)
    assert_close(out_tpu, out_cpu)
    out_cpu.pow(2).sum().backward()
    out_tpu.pow(2).sum().backward()
    assert_close(x_tpu.grad, x_cpu.grad)


def test_bad_arguments_raise_clear_errors():
    x = torch.randn(1, 2, 4, 4, device="tpu")
    with pytest.raises(RuntimeError, match="same batch size"):
        torch.grid_sampler_2d(x, torch.zeros(2, 3, 3, 2, device="tpu"), 0, 0, False)
    with pytest.raises(RuntimeError, match="bicubic"):
        torch.grid_sampler_3d(x.unsqueeze(2), torch.zeros(1, 1, 3, 3, 3, device="tpu"), 2, 0, False)
    with pytest.raises(RuntimeError, match="padding mode"):
        torch.grid_sampler_2d(x, torch.zeros(1, 3, 3, 2, device="tpu"), 0, 7, False)


@pytest.mark.parametrize("dims,mode", [(2, 0), (2, 1), (2, 2), (3, 0)])
def test_direct_backward_op_matches_cpu(dims, mode, strict_no_fallback):
    x, grid = _inputs(dims, seed=5)
    forward = torch.ops.aten.grid_sampler_2d if dims == 2 else torch.ops.aten.grid_sampler_3d
    backward = torch.ops.aten.grid_sampler_2d_backward if dims == 2 else torch.ops.aten.grid_sampler_3d_backward
    grad_out = torch.randn_like(forward(x, grid, mode, 2, False))
    for mask in ([True, True], [False, True]):
        want = backward(grad_out, x, grid, mode, 2, False, mask)
        got = backward(grad_out.to("tpu"), x.to("tpu"), grid.to("tpu"), mode, 2, False, mask)
        assert (got[0] is None) == (want[0] is None)
        if want[0] is not None:
            assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
        assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)


def test_inference_mode_forward_matches_cpu(strict_no_fallback):
    x, grid = _inputs(2, seed=6)
    with torch.inference_mode():
        got = F.grid_sample(x.to("tpu"), grid.to("tpu"), mode="bilinear", align_corners=False)
        got_aa = F.interpolate(x.to("tpu"), size=(3, 2), mode="bilinear", antialias=True)
    assert_close(got, F.grid_sample(x, grid, mode="bilinear", align_corners=False))
    assert_close(got_aa, F.interpolate(x, size=(3, 2), mode="bilinear", antialias=True))
