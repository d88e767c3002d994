// torch.fft on StableHLO: _fft_c2c, _fft_r2c and _fft_c2r. Each transformed dim is moved last,
// transformed with a 1-D stablehlo.fft, and moved back (a multi-dim DFT is separable); the
// normalisation of PyTorch's mode is applied once at the end.
#include "lowering/fft.h"

#include <cmath>
#include <stdexcept>

#include "lowering/hlo_names.h"
#include "lowering/registry.h"

namespace tpu::lowering {

Value fft_last_dim(Builder& b, Value x, const char* kind, int64_t length) {
  const std::string k = kind;
  TensorType t = b.type(x);
  const int64_t last = t.rank() - 1;
  const ElementType part = complex_part(t.dtype);
  const ElementType cplx = part == ElementType::kF64 ? ElementType::kC128 : ElementType::kC64;
  if (k == "RFFT") {
    t.dims[last] = length / 2 + 1;
    t.dtype = cplx;
  } else if (k == "IRFFT") {
    t.dims[last] = length;
    t.dtype = part;
  }
  Value y = b.emit("stablehlo.fft", {x}, t,
                   "fft_type = #stablehlo<fft_type " + k + ">, fft_length = " + hlo::i64_array({length}));
  // XLA's inverse transforms divide by the length; PyTorch's normalisation is applied later.
  if (k == "IFFT" || k == "IRFFT") y = b.mul(y, b.full(b.type(y), static_cast<double>(length)));
  return y;
}

namespace {

using Args = std::vector<Value>;

// `x` with its dimension `d` last, and the permutation that undoes it.
Value move_last(Builder& b, Value x, int64_t d, Dims* back) {
  const int64_t r = b.type(x).rank();
  Dims perm;
  for (int64_t i = 0; i < r; ++i) if (i != d) perm.push_back(i);
  perm.push_back(d);
  back->assign(r, 0);
  for (int64_t i = 0; i < r; ++i) (*back)[perm[i]] = i;
  return b.transpose(x, perm);
}

Value along(Builder& b, Value x, int64_t d, const char* kind, int64_t length) {
  Dims back;
  Value y = fft_last_dim(b, move_last(b, x, d, &back), kind, length);
  return b.transpose(y, back);
}

Value normalize(Builder& b, Value y, int64_t mode, double n) {
  switch (static_cast<FftNorm>(mode)) {
    case FftNorm::kNone: return y;
    case FftNorm::kByRootN: return b.mul(y, b.full(b.type(y), 1.0 / std::sqrt(n)));
    case FftNorm::kByN: return b.mul(y, b.full(b.type(y), 1.0 / n));
  }
  throw std::invalid_argument("fft: unknown normalization mode " + std::to_string(mode));
}

Value to_complex(Builder& b, Value x) {
  const ElementType t = b.dtype(x);
  if (is_complex(t)) return x;
  return b.convert(x, t == ElementType::kF64 ? ElementType::kC128 : ElementType::kC64);
}

// _fft_c2c(self, dim, normalization, forward)
Args lower_c2c(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = to_complex(b, in[0]);
  const Dims& dims = ctx.attrs.get_ints("dim");
  const bool forward = ctx.attrs.get_bool("forward");
  double n = 1;
  for (int64_t d : dims) {
    const int64_t len = b.dims(x)[d];
    n *= static_cast<double>(len);
    if (len > 0) x = along(b, x, d, forward ? "FFT" : "IFFT", len);
  }
  return {normalize(b, x, ctx.attrs.get_int("normalization"), n)};
}

// _fft_r2c(self, dim, normalization, onesided): the last listed dim is halved when onesided.
Args lower_r2c(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = in[0];
  const Dims& dims = ctx.attrs.get_ints("dim");
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(b.dims(x)[d]);
  if (!ctx.attrs.get_bool("onesided")) {
    x = to_complex(b, x);
    for (int64_t d : dims) x = along(b, x, d, "FFT", b.dims(x)[d]);
  } else {
    const int64_t d_last = dims.back();
    x = along(b, x, d_last, "RFFT", b.dims(x)[d_last]);
    for (size_t i = 0; i + 1 < dims.size(); ++i) x = along(b, x, dims[i], "FFT", b.dims(x)[dims[i]]);
  }
  return {normalize(b, x, ctx.attrs.get_int("normalization"), n)};
}

// _fft_c2r(self, dim, normalization, last_dim_size): inverse over all dims, the last one real.
Args lower_c2r(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  Value x = to_complex(b, in[0]);
  const Dims& dims = ctx.attrs.get_ints("dim");
  const int64_t last_size = ctx.attrs.get_int("last_dim_size");
  double n = static_cast<double>(last_size);
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    const int64_t len = b.dims(x)[dims[i]];
    n *= static_cast<double>(len);
    x = along(b, x, dims[i], "IFFT", len);
  }
  const int64_t d_last = dims.back();
  // IRFFT reads length/2 + 1 inputs; PyTorch passes at least that many and ignores the rest.
  const int64_t need = last_size / 2 + 1;
  if (b.dims(x)[d_last] != need) {
    Dims start(b.type(x).rank(), 0), limit = b.dims(x), steps(b.type(x).rank(), 1);
    limit[d_last] = need;
    x = b.slice(x, start, limit, steps);
  }
  x = along(b, x, d_last, "IRFFT", last_size);
  return {normalize(b, x, ctx.attrs.get_int("normalization"), n)};
}

const LoweringEntry kFft[] = {
    {"fft_c2c", lower_c2c}, {"fft_r2c", lower_r2c}, {"fft_c2r", lower_c2r},
};
TPU_REGISTER_LOWERINGS(kFft);

}  // namespace
}  // namespace tpu::lowering
