#include "lowering/cast.h"

namespace tpu::lowering {
namespace {

hlo::TensorType with_dtype(hlo::TensorType t, ElementType d) {
  t.dtype = d;
  return t;
}

// complex32 bits (float16 real part in the low half, imaginary part in the high half, as
// PyTorch lays out complex<Half>) -> complex64.
hlo::Value widen_complex32(hlo::Builder& b, hlo::Value bits) {
  hlo::Dims d = b.dims(bits);
  hlo::Dims pair = d;
  pair.push_back(2);
  hlo::Value halves = b.bitcast_convert(bits, hlo::TensorType{ElementType::kF16, pair});
  hlo::Dims start(pair.size(), 0), limit = pair, strides(pair.size(), 1);
  auto part = [&](int64_t k) {
    start.back() = k;
    limit.back() = k + 1;
    return b.convert(b.reshape(b.slice(halves, start, limit, strides), d), ElementType::kF32);
  };
  hlo::Value re = part(0), im = part(1);
  return b.emit("stablehlo.complex", {re, im}, hlo::TensorType{ElementType::kC64, d});
}

// complex64 -> complex32 bits (each part rounded to float16).
hlo::Value narrow_to_complex32(hlo::Builder& b, hlo::Value c) {
  hlo::Dims d = b.dims(c);
  hlo::Dims one = d;
  one.push_back(1);
  auto part = [&](const char* op) {
    hlo::Value p = b.emit(op, {c}, with_dtype(b.type(c), ElementType::kF32));
    return b.reshape(b.convert(p, ElementType::kF16), one);
  };
  hlo::Value halves = b.concatenate({part("stablehlo.real"), part("stablehlo.imag")}, static_cast<int64_t>(d.size()));
  return b.bitcast_convert(halves, hlo::TensorType{ElementType::kC32, d});
}

}  // namespace

hlo::Value cast(hlo::Builder& b, hlo::Value v, ElementType to) {
  const ElementType from = b.dtype(v);
  if (from == to) return v;
  if (from == ElementType::kC32) return cast(b, widen_complex32(b, v), to);
  if (to == ElementType::kC32) return narrow_to_complex32(b, cast(b, v, ElementType::kC64));
  if (is_complex(from) && to == ElementType::kBool) {  // true where either part is nonzero, as in PyTorch
    return b.compare(v, b.full(b.type(v), 0), hlo::Compare::kNE);
  }
  if (is_complex(from) && !is_complex(to)) {  // PyTorch keeps the real part; XLA refuses the convert
    hlo::TensorType part = b.type(v);
    part.dtype = complex_part(from);
    return cast(b, b.emit("stablehlo.real", {v}, part), to);
  }
  if (to == ElementType::kBool) {
    return b.compare(v, b.full(b.type(v), 0), hlo::Compare::kNE);
  }
  if (is_floating(from) && is_integral(to) && to != ElementType::kI64) {
    return b.convert(b.convert(v, ElementType::kI64), to);
  }
  return b.convert(v, to);
}

}  // namespace tpu::lowering
