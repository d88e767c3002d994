// Matrix products: mm, bmm, addmm. Half-precision inputs accumulate in float32 (as PyTorch
// does); the operand precision follows lowering/precision.h.
#include "lowering/hlo_names.h"
#include "lowering/precision.h"
#include "lowering/registry.h"
#include "lowering/shape_helpers.h"

#include <stdexcept>

namespace tpu::lowering {
namespace {

Value matmul(Builder& b, const Attrs& attrs, Value x, Value y, const hlo::Dims& batch, int64_t lc, int64_t rc) {
  const ElementType t = b.dtype(x);
  const bool half = t == ElementType::kF16 || t == ElementType::kBF16;
  const ElementType acc = half ? ElementType::kF32 : t;
  Value r = b.dot_general(x, y, batch, batch, {lc}, {rc}, acc, contraction_precision(attrs, t));
  return b.convert(r, t);
}

void check_rank(Builder& b, Value v, int64_t rank, const char* op, const char* arg) {
  if (b.type(v).rank() != rank) {
    throw std::invalid_argument(std::string(op) + ": " + arg + " must be a " +
                                std::to_string(rank) + "D tensor, got " + b.type(v).str());
  }
}

std::vector<Value> lower_mm(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  check_rank(b, in[0], 2, "mm", "self");
  check_rank(b, in[1], 2, "mm", "mat2");
  if (b.dims(in[0])[1] != b.dims(in[1])[0]) {
    throw std::invalid_argument("mat1 and mat2 shapes cannot be multiplied (" +
                                std::to_string(b.dims(in[0])[0]) + "x" + std::to_string(b.dims(in[0])[1]) +
                                " and " + std::to_string(b.dims(in[1])[0]) + "x" +
                                std::to_string(b.dims(in[1])[1]) + ")");
  }
  return {matmul(b, ctx.attrs, in[0], in[1], {}, 1, 0)};
}

std::vector<Value> lower_bmm(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  check_rank(b, in[0], 3, "bmm", "batch1");
  check_rank(b, in[1], 3, "bmm", "batch2");
  const auto& x = b.dims(in[0]);
  const auto& y = b.dims(in[1]);
  if (x[0] != y[0] || x[2] != y[1]) {
    throw std::invalid_argument("bmm: expected batch1 " + b.type(in[0]).str() + " and batch2 " +
                                b.type(in[1]).str() + " to have matching batch and inner sizes");
  }
  return {matmul(b, ctx.attrs, in[0], in[1], {0}, 2, 1)};
}

// addmm(bias, m1, m2, beta, alpha) = beta * bias + alpha * (m1 @ m2).
// attrs beta_mode: 0 = bias ignored (beta == 0, so NaNs in bias do not propagate),
// 1 = beta is 1, 2 = scaled; alpha_is_one.
std::vector<Value> lower_addmm(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  Context inner{b, ctx.attrs};
  Value prod = lower_mm(inner, {in[1], in[2]})[0];
  if (!ctx.attrs.get_bool("alpha_is_one", true)) prod = b.mul(prod, b.broadcast_to(in[4], b.dims(prod)));
  const int64_t beta_mode = ctx.attrs.get_int("beta_mode", 1);
  if (beta_mode == 0) return {prod};
  Value bias = b.broadcast_to(in[0], b.dims(prod));
  if (beta_mode == 2) bias = b.mul(bias, b.broadcast_to(in[3], b.dims(prod)));
  return {b.add(bias, prod)};
}

// mv: matrix [n, m] times vector [m]; dot: vector . vector.
std::vector<Value> lower_mv(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  check_rank(b, in[0], 2, "mv", "self");
  check_rank(b, in[1], 1, "mv", "vec");
  if (b.dims(in[0])[1] != b.dims(in[1])[0]) {
    throw std::invalid_argument("size mismatch, got input (" + std::to_string(b.dims(in[0])[0]) + "), mat (" +
                                std::to_string(b.dims(in[0])[0]) + "x" + std::to_string(b.dims(in[0])[1]) +
                                "), vec (" + std::to_string(b.dims(in[1])[0]) + ")");
  }
  return {matmul(b, ctx.attrs, in[0], in[1], {}, 1, 0)};
}

std::vector<Value> lower_dot(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  check_rank(b, in[0], 1, "dot", "self");
  check_rank(b, in[1], 1, "dot", "tensor");
  if (b.dims(in[0])[0] != b.dims(in[1])[0]) {
    throw std::invalid_argument("inconsistent tensor size, expected tensor [" + std::to_string(b.dims(in[0])[0]) +
                                "] and src [" + std::to_string(b.dims(in[1])[0]) +
                                "] to have the same number of elements, but got " +
                                std::to_string(b.dims(in[0])[0]) + " and " + std::to_string(b.dims(in[1])[0]) +
                                " elements respectively");
  }
  return {matmul(b, ctx.attrs, in[0], in[1], {}, 0, 0)};
}

// addmv(bias, mat, vec, beta, alpha): as addmm with a vector.
std::vector<Value> lower_addmv(Context& ctx, const std::vector<Value>& in) {
  auto& b = ctx.b;
  Context inner{b, ctx.attrs};
  Value prod = lower_mv(inner, {in[1], in[2]})[0];
  if (!ctx.attrs.get_bool("alpha_is_one", true)) prod = b.mul(prod, b.broadcast_to(in[4], b.dims(prod)));
  const int64_t beta_mode = ctx.attrs.get_int("beta_mode", 1);
  if (beta_mode == 0) return {prod};
  Value bias = b.broadcast_to(in[0], b.dims(prod));
  if (beta_mode == 2) bias = b.mul(bias, b.broadcast_to(in[3], b.dims(prod)));
  return {b.add(bias, prod)};
}

TPU_REGISTER_LOWERING("mm", lower_mm);
TPU_REGISTER_LOWERING("mv", lower_mv);
TPU_REGISTER_LOWERING("dot", lower_dot);
TPU_REGISTER_LOWERING("addmv", lower_addmv);
TPU_REGISTER_LOWERING("bmm", lower_bmm);
TPU_REGISTER_LOWERING("addmm", lower_addmm);

}  // namespace
}  // namespace tpu::lowering
