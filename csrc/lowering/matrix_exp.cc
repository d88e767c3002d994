// matrix_exp on batched [B, n, n] float or complex operands by scaling and squaring, as PyTorch's CPU and
// CUDA kernels do for batches: each matrix is scaled by 2^-s so that its 1-norm is at most
// theta, exp of the scaled matrix comes from the degree-18 Taylor approximant of Bader, Blanes
// and Casas ("Computing the matrix exponential with an optimized Taylor polynomial
// approximation", 2019: five matrix products), and s squarings undo the scaling. Using the
// same approximant and theta as PyTorch means the same number of squarings - they dominate the
// rounding error in float32. s differs per matrix; the squaring loop runs max(s) times and each
// matrix squares only while its own count lasts.
#include <cmath>

#include "lowering/hlo_names.h"
#include "lowering/pointwise.h"
#include "lowering/registry.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

constexpr double kMaxScalePower = 1000;  // bounds s for huge/inf norms (the result overflows anyway)

// The approximant's coefficients (Bader, Blanes, Casas 2019, degree 18): row i gives
// B_i = sum_j c[i][j] * P_j over the powers P = (I, A, A^2, A^3, A^6).
constexpr double kT18[5][5] = {
    {0., -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045729985177e-04, 0.},
    {0., 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
     -6.37898194594723280150e-04},
    {-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
     -6.98210122488052056106e-03, 3.34975017086070470649e-05},
    {-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
     2.95552570429315521194e-02, -1.39180257516060693404e-05},
    {0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02, -1.40086798182036094347e-05},
};

Value batched_matmul(Builder& b, Value x, Value y) {
  return b.dot_general(x, y, {0}, {0}, {2}, {1}, b.dtype(x), /*highest_precision=*/true);
}

// T18(A) = B1 + (B2 + A9) A9 with A9 = B0 B4 + B3.
Value taylor18(Builder& b, Value a) {
  const TensorType type = b.type(a);
  const TensorType it{ElementType::kI64, type.dims};
  Value eye = b.select(b.compare(b.iota(it, 1), b.iota(it, 2), Compare::kEQ), b.full(type, 1), b.full(type, 0));
  Value a2 = batched_matmul(b, a, a);
  Value a3 = batched_matmul(b, a, a2);
  Value a6 = batched_matmul(b, a3, a3);
  const Value powers[5] = {eye, a, a2, a3, a6};
  auto combination = [&](int row) {
    Value sum = b.full(type, 0);
    for (int j = 0; j < 5; ++j) {
      if (kT18[row][j] != 0) sum = b.add(sum, b.mul(powers[j], b.full(type, kT18[row][j])));
    }
    return sum;
  };
  Value a9 = b.add(batched_matmul(b, combination(0), combination(4)), combination(3));
  return b.add(combination(1), batched_matmul(b, b.add(combination(2), a9), a9));
}

Args lower_matrix_exp(Context& ctx, const Args& in) {
  auto& b = ctx.b;
  const Value a = in[0];
  const Dims d = b.dims(a);
  const ElementType t = b.dtype(a);
  const ElementType rt = is_complex(t) ? complex_part(t) : t;  // the norm's and the scale's type
  const int64_t batch = d[0];
  const TensorType per_matrix{rt, {batch}};
  // PyTorch's degree-18 bounds (single and double precision, real or complex).
  const double theta = rt == ElementType::kF64 ? 1.090863719290036 : 3.010066362817634;

  // s = max(0, ceil(log2(||A||_1 / theta))) per matrix; NaN norms give s = 0 (the result is NaN).
  Value col_sums = b.reduce(magnitude(b, a), b.constant(rt, 0), {1}, ReduceKind::kSum);  // [B, n]
  Value norm = b.reduce(col_sums, b.constant(rt, 0), {1}, ReduceKind::kMax);             // [B]
  Value s = b.div(b.unary("stablehlo.log", b.div(norm, b.full(per_matrix, theta))), b.full(per_matrix, std::log(2.0)));
  s = b.unary("stablehlo.ceil", s);
  s = b.clamp(b.constant(rt, 0), s, b.constant(rt, kMaxScalePower));
  s = b.select(b.compare(s, s, Compare::kEQ), s, b.full(per_matrix, 0));
  Value scale = b.convert(b.binary("stablehlo.power", b.full(per_matrix, 2.0), b.neg(s)), t);
  Value p = taylor18(b, b.mul(a, b.broadcast_in_dim(scale, d, {0})));

  // s squarings, matrix by matrix (the loop carries everything it reads).
  Value steps = b.convert(s, ElementType::kI64);  // [B]
  Value max_steps = b.reduce(steps, b.constant_int(ElementType::kI64, 0), {0}, ReduceKind::kMax);
  auto out = b.while_loop(
      {b.constant_int(ElementType::kI64, 0), p, steps, max_steps},
      [&](const Args& v) { return Args{b.compare(v[0], v[3], Compare::kLT)}; },
      [&](const Args& v) {
        Value i = v[0], m = v[1], own_steps = v[2];
        Value active = b.compare(b.broadcast_in_dim(i, {batch}, {}), own_steps, Compare::kLT);
        m = b.select(b.broadcast_in_dim(active, d, {0}), batched_matmul(b, m, m), m);
        return Args{b.add(i, b.constant_int(ElementType::kI64, 1)), m, own_steps, v[3]};
      });
  return {out[1]};
}

}  // namespace

TPU_REGISTER_LOWERING("matrix_exp", lower_matrix_exp);

}  // namespace tpu::lowering
