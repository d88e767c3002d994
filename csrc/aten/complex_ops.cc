// Complex tensors on tpu: the views between complex and real storage (view_as_real,
// view_as_complex), conj_physical, torch.complex, torch.polar, complex abs/angle, and the list
// of lowerings that handle complex values (complex_support.h).
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/conj_physical.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <torch/library.h>

#include <set>

#include "aten/complex_support.h"
#include "aten/op_runner.h"
#include "aten/tensor_access.h"

namespace tpu::aten {

bool lowering_supports_complex(const std::string& op, const lowering::Attrs& attrs) {
  // Ops whose lowerings are the plain StableHLO/CHLO op on any element type, or written for
  // complex; each is checked against the CPU by the OpInfo sweep's complex64 samples.
  static const std::set<std::string> kOk = {
      // pointwise
      "copy", "full", "add", "sub", "mul", "neg", "rsub", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10",
      "sqrt", "rsqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
      "atanh", "sigmoid", "silu", "sinc", "reciprocal", "pow", "logaddexp", "eq", "ne", "isnan", "isinf", "isfinite", "lerp",
      "addcmul", "addcdiv", "logical_not", "logical_and", "logical_or", "logical_xor", "where", "masked_fill",
      "conj", "complex", "polar", "complex_real", "complex_imag", "complex_abs", "complex_angle", "complex_sgn",
      // reductions and scans (var and vector_norm reduce real magnitudes)
      "sum", "mean", "prod", "cumsum", "cumprod", "all", "any", "var", "vector_norm", "logsumexp", "logcumsumexp",
      "renorm",
      // products
      "mm", "bmm", "mv", "dot", "addmm", "addmv", "cross",
      // LU and triangular solves (LAPACK's pivoting and adjoints for complex)
      "lu_factor", "apply_pivots", "lu_split", "lu_det", "triangular_solve", "eigh", "eig", "cholesky", "geqrf", "householder_product",
      "ldl_factor", "ldl_solve", "matrix_exp",
      // data movement
      "cat", "pad_constant", "pad_index", "pad_index_backward", "roll", "flip", "triangle", "eye", "im2col",
      "index", "index_put", "index_select", "index_fill", "gather", "take", "put", "nonzero", "masked_select",
      "masked_scatter",
      // transforms
      "fft_c2c", "fft_r2c", "fft_c2r"};
  if (op == "div") return attrs.get_int("rounding_mode", 0) == 0;  // floor/trunc are real-only
  if (op == "scatter" || op == "index_update") {  // sums, products and plain writes; no ordering
    const std::string& reduce = attrs.get_string("reduce");
    return reduce == "none" || reduce == "copy" || reduce == "add" || reduce == "sum" || reduce == "multiply" ||
           reduce == "prod";
  }
  return kOk.count(op) > 0;
}

bool lowering_moves_bits(const std::string& op) {
  static const std::set<std::string> kMoves = {"copy", "cat", "flip", "roll", "index", "index_select", "gather", "take"};
  return kMoves.count(op) > 0;
}

namespace {

at::ScalarType real_of(at::ScalarType t) { return c10::toRealValueType(t); }

// abs / angle / sgn of a complex tensor (abs, angle: real results, which the table kernel's
// dtype rule does not give).
at::Tensor complex_to_real(const char* lowering, const char* label, const at::Tensor& self) {
  return OpRunner(lowering, label).input(self).run1();
}

}  // namespace

bool complex_pointwise(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* lowering) {
  const std::string name = lowering;
  const bool own_kernel = name == "abs" || name == "angle" || name == "sign";
  if (!own_kernel && lowering_supports_complex(name, lowering::Attrs{})) return false;
  const auto& schema = op.schema();
  const char* own = name == "abs" ? "complex_abs" : name == "angle" ? "complex_angle" : name == "sign" ? "complex_sgn" : nullptr;
  if (own != nullptr && schema.arguments()[0].type()->kind() == c10::TypeKind::TensorType) {
    const size_t n = schema.arguments().size();
    auto args = torch::jit::last(*stack, n);
    const at::Tensor self = args[0].toTensor();
    if (self.is_complex()) {
      at::Tensor result = complex_to_real(own, schema.name().c_str(), self);
      int out_index = -1;
      for (size_t i = 0; i < n; ++i) {
        if (schema.arguments()[i].is_out()) out_index = static_cast<int>(i);
      }
      if (out_index >= 0) {
        at::Tensor out = args[out_index].toTensor();
        TORCH_CHECK(c10::canCast(result.scalar_type(), out.scalar_type()), "result type ",
                    result.scalar_type(), " can't be cast to the desired output type ", out.scalar_type());
        at::native::resize_output(out, result.sizes());
        out.copy_(result);
        result = out;
      }
      torch::jit::drop(*stack, n);
      stack->emplace_back(std::move(result));
      return true;
    }
  }
  run_cpu_fallback(op, stack);
  return true;
}

bool has_math_bits(const at::Tensor& src, const at::Tensor& dst) {
  return src.is_conj() || src.is_neg() || dst.is_conj() || dst.is_neg();
}

at::Tensor copy_with_math_bits(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  const bool conj = src.is_conj() != dst.is_conj();
  const bool neg = src.is_neg() != dst.is_neg();
  // Views of the physical values (toggling a bit twice clears it).
  at::Tensor s = src.is_conj() ? src.conj() : src;
  if (s.is_neg()) s = s._neg_view();
  at::Tensor d = dst.is_conj() ? dst.conj() : dst;
  if (d.is_neg()) d = d._neg_view();
  if (s.is_privateuseone()) {
    if (conj) s = OpRunner("conj", "aten::copy_ (conjugate bit)").input(s).run1();
    if (neg) s = OpRunner("neg", "aten::copy_ (negative bit)").input(s).run1();
  } else {
    if (conj) s = at::conj_physical(s);
    if (neg) s = at::neg(s);
  }
  d.copy_(s, non_blocking);
  return dst;
}

namespace {

at::Tensor& k_conj_physical_out(const at::Tensor& self, at::Tensor& out) {
  at::native::resize_output(out, self.sizes());
  OpRunner("conj", "aten::conj_physical").input(self).run_into(out);
  return out;
}

// complex(real, imag) and polar(abs, angle): two real inputs of one float dtype.
at::Tensor& from_parts(const char* lowering, const char* label, const at::Tensor& a, const at::Tensor& b,
                       at::Tensor& out) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "Expected object of scalar type ", a.scalar_type(),
              " but got scalar type ", b.scalar_type(), " for second argument");
  TORCH_CHECK(a.scalar_type() == at::kFloat || a.scalar_type() == at::kDouble || a.scalar_type() == at::kHalf,
              "Expected both inputs to be Half, Float or Double tensors but got ", a.scalar_type(), " and ",
              b.scalar_type());
  TORCH_CHECK(out.is_complex() && real_of(out.scalar_type()) == a.scalar_type(), "Expected object of scalar type ",
              c10::toComplexType(a.scalar_type()), " but got scalar type ", out.scalar_type(), " for argument 'out'");
  const auto shape = at::infer_size(a.sizes(), b.sizes());
  at::native::resize_output(out, shape);
  const at::ScalarType part = real_of(out.scalar_type());
  OpRunner r(lowering, label);
  r.input(a, part).input(b, part);
  r.attrs().set_ints("shape", hlo::Dims(shape.begin(), shape.end()));
  r.run_into(out);
  return out;
}

at::Tensor& k_complex_out(const at::Tensor& re, const at::Tensor& im, at::Tensor& out) {
  return from_parts("complex", "aten::complex", re, im, out);
}
at::Tensor& k_polar_out(const at::Tensor& abs, const at::Tensor& angle, at::Tensor& out) {
  return from_parts("polar", "aten::polar", abs, angle, out);
}

// The math-bit fallbacks would resolve a conjugate source by cloning it - a copy_ that lands
// here again. copy_with_math_bits resolves the bits instead.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("conj_physical.out", k_conj_physical_out);
  m.impl("complex.out", k_complex_out);
  m.impl("polar.out", k_polar_out);
}

}  // namespace
}  // namespace tpu::aten
