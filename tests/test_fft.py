"""torch.fft on tpu (lowered to StableHLO's fft through _fft_c2c / _fft_r2c / _fft_c2r), with
every normalization mode, compared with the CPU's pocketfft results."""

import pytest
import torch

import torch_tpu
from helpers import assert_close

TOL = {torch.complex64: 2e-5, torch.float32: 2e-5, torch.complex128: 1e-11, torch.float64: 1e-11}


def close(tpu, cpu):
    tol = TOL[cpu.dtype] * max(1.0, cpu.abs().max().item())
    assert_close(tpu, cpu, rtol=tol, atol=tol)


def data(dtype, shape=(3, 6, 8), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g)


NORMS = [None, "ortho", "forward", "backward"]

COMPLEX_INPUT = {
    "fft": lambda x, norm: torch.fft.fft(x, norm=norm),
    "ifft": lambda x, norm: torch.fft.ifft(x, norm=norm),
    "fft_dim0_n": lambda x, norm: torch.fft.fft(x, n=5, dim=0, norm=norm),  # crop
    "ifft_pad": lambda x, norm: torch.fft.ifft(x, n=11, norm=norm),        # zero-pad
    "fft2": lambda x, norm: torch.fft.fft2(x, norm=norm),
    "ifft2": lambda x, norm: torch.fft.ifft2(x, norm=norm),
    "fftn": lambda x, norm: torch.fft.fftn(x, norm=norm),
    "ifftn": lambda x, norm: torch.fft.ifftn(x, s=(4, 6), dim=(0, 2), norm=norm),
    "irfft": lambda x, norm: torch.fft.irfft(x, norm=norm),
    "irfft_n": lambda x, norm: torch.fft.irfft(x, n=9, norm=norm),
    "irfftn": lambda x, norm: torch.fft.irfftn(x, norm=norm),
    "irfft2": lambda x, norm: torch.fft.irfft2(x, s=(6, 10), norm=norm),
    "hfft": lambda x, norm: torch.fft.hfft(x, norm=norm),
}

REAL_INPUT = {
    "rfft": lambda x, norm: torch.fft.rfft(x, norm=norm),
    "rfft_odd": lambda x, norm: torch.fft.rfft(x, n=7, dim=1, norm=norm),
    "rfft2": lambda x, norm: torch.fft.rfft2(x, norm=norm),
    "rfftn": lambda x, norm: torch.fft.rfftn(x, norm=norm),
    "fft_of_real": lambda x, norm: torch.fft.fft(x, norm=norm),  # r2c, two-sided
    "fftn_of_real": lambda x, norm: torch.fft.fftn(x, dim=(0, 1), norm=norm),
    "ihfft": lambda x, norm: torch.fft.ihfft(x, norm=norm),
}


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("name", sorted(COMPLEX_INPUT))
def test_complex_input_transforms(name, norm, no_fallback):
    x = data(torch.complex64)
    close(COMPLEX_INPUT[name](x.to("tpu"), norm), COMPLEX_INPUT[name](x, norm))


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("name", sorted(REAL_INPUT))
def test_real_input_transforms(name, norm, no_fallback):
    x = data(torch.float32)
    close(REAL_INPUT[name](x.to("tpu"), norm), REAL_INPUT[name](x, norm))


@pytest.mark.parametrize("name", ["fft", "irfft", "ifftn"])
def test_complex128(name, no_fallback):
    x = data(torch.complex128)
    close(COMPLEX_INPUT[name](x.to("tpu"), "ortho"), COMPLEX_INPUT[name](x, "ortho"))
    r = data(torch.float64)
    close(torch.fft.rfftn(r.to("tpu")), torch.fft.rfftn(r))


def test_shifts_and_frequencies(no_fallback):
    x = data(torch.complex64, (5, 6))
    t = x.to("tpu")
    close(torch.fft.fftshift(t), torch.fft.fftshift(x))
    close(torch.fft.ifftshift(t, dim=0), torch.fft.ifftshift(x, dim=0))
    close(torch.fft.fftshift(torch.fft.fft2(t)), torch.fft.fftshift(torch.fft.fft2(x)))


def test_transform_of_a_strided_view(no_fallback):
    x = data(torch.complex64, (6, 10))
    close(torch.fft.fft(x.to("tpu")[::2, 1:].transpose(0, 1)), torch.fft.fft(x[::2, 1:].transpose(0, 1)))


def test_fft_autograd(no_fallback):
    r = data(torch.float32, (4, 8))
    a = r.clone().requires_grad_()
    b = r.to("tpu").requires_grad_()
    for v in (a, b):
        spec = torch.fft.rfft(v, norm="ortho")
        back = torch.fft.irfft(spec * spec.conj() + torch.fft.fft(v, dim=0)[:, :5], n=8)
        (back * back).sum().backward()
    close(b.grad, a.grad)


def test_stft_with_window(no_fallback):
    sig = data(torch.float32, (2, 64))
    win = torch.hann_window(16)
    kw = dict(n_fft=16, hop_length=4, return_complex=True)
    close(torch.stft(sig.to("tpu"), window=win.to("tpu"), **kw), torch.stft(sig, window=win, **kw))
    kw2 = dict(n_fft=16, hop_length=4, win_length=12, center=False, normalized=True, onesided=False, return_complex=True)
    win2 = torch.hamming_window(12)
    close(torch.stft(sig.to("tpu"), window=win2.to("tpu"), **kw2), torch.stft(sig, window=win2, **kw2))


def test_istft_round_trip():
    sig = data(torch.float32, (64,))
    win = torch.hann_window(16)
    spec = torch.stft(sig, 16, hop_length=4, window=win, return_complex=True)
    torch_tpu.reset_fallback_counts()
    out = torch.istft(spec.to("tpu"), 16, hop_length=4, window=win.to("tpu"))
    close(out, torch.istft(spec, 16, hop_length=4, window=win))
    # the transforms run on the device; only the real overlap-add (unfold_backward) may not
    assert set(torch_tpu.fallback_counts()) <= {"aten::unfold_backward"}, torch_tpu.fallback_counts()


def test_bad_input_is_a_clear_error():
    x = data(torch.complex64, (4, 8)).to("tpu")
    with pytest.raises(IndexError):
        torch.fft.fft(x, dim=3)
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        torch.fft.fft(x, n=0)
    with pytest.raises(RuntimeError):
        torch.fft.rfft(x)  # rfft needs a real input


@pytest.mark.parametrize("window", [torch.hann_window, torch.hamming_window, torch.bartlett_window,
                                    torch.blackman_window, torch.kaiser_window])
def test_window_functions_equal_the_cpu(window, no_fallback):
    # kaiser_window's composite fills its result through a DispatchStub: on tpu that was an
    # internal assert until the stub got a tpu kernel (aten/window_ops.cc).
    for length in (0, 1, 2, 7, 64):
        for periodic in (True, False):
            for dtype in (torch.float32, torch.float64):
                got = window(length, periodic=periodic, dtype=dtype, device="tpu")
                assert_close(got, window(length, periodic=periodic, dtype=dtype), rtol=1e-5, atol=1e-6)
    if window is torch.kaiser_window:
        assert_close(torch.kaiser_window(9, False, 3.5, device="tpu"), torch.kaiser_window(9, False, 3.5),
                     rtol=1e-5, atol=1e-6)
        with pytest.raises(RuntimeError, match="expects floating point dtypes"):
            torch.kaiser_window(5, dtype=torch.long, device="tpu")
