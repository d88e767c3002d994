// Discrete Fourier transforms on StableHLO's `fft` op, as PyTorch's _fft_c2c / _fft_r2c /
// _fft_c2r define them (dims, normalization mode, onesided output, last_dim_size).
#pragma once

#include "hlo/builder.h"

namespace tpu::lowering {

// PyTorch's fft_norm_mode: none, 1/sqrt(n), 1/n (of the signal size n over all dims).
enum class FftNorm : int64_t { kNone = 0, kByRootN = 1, kByN = 2 };

// One stablehlo.fft over the last dimension of `x`: kind is "FFT", "IFFT", "RFFT" or "IRFFT";
// `length` is the signal length (IRFFT: the real output's length). XLA normalises its IFFT and
// IRFFT by 1/length; this helper undoes that, so every kind is the unnormalised transform.
hlo::Value fft_last_dim(hlo::Builder& b, hlo::Value x, const char* kind, int64_t length);

}  // namespace tpu::lowering
