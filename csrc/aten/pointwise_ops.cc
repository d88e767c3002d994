// One boxed kernel for every pointwise aten op, driven by a table: which lowering, how the
// compute dtype is chosen, which arguments are masks. Structured ops need only their out=
// overload here - PyTorch's CompositeExplicitAutogradNonFunctional kernels run the op's meta
// function (shape, dtype, PyTorch's own errors) and call it for the functional and in-place
// forms. Non-structured ops list their functional and in-place overloads too.
#include <ATen/ExpandUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <torch/library.h>

#include <mutex>
#include <set>
#include <unordered_map>

#include "aten/complex_support.h"
#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

enum class Promote : uint8_t {
  kCommon,  // ATen's result_type of the tensor and Scalar arguments
  kFloat,   // the same, with integral types promoted to the default float dtype
  kSelf,    // the dtype of the first argument (masked_fill)
  kBool,    // every input converted to bool (logical ops)
};

struct Spec {
  const char* lowering;
  Promote promote = Promote::kCommon;
  bool bool_result = false;  // the natural output dtype is bool
  uint32_t mask_args = 0;    // bit i: schema argument i is a condition/mask (bool, no promotion)
  // The compute dtypes the CPU has kernels for; others are its NotImplementedError.
  enum class Dtypes : uint8_t { kAll, kIntegral, kIntegralNoBool, kNoBool, kFloating } dtypes = Dtypes::kAll;
  bool divides = false;  // argument 1 divides argument 0: an integral division by zero raises
};
using Dtypes = Spec::Dtypes;

// A spec whose op the CPU implements for `dtypes` only (the same error here).
constexpr Spec only(const char* lowering, Dtypes dtypes) {
  Spec s{lowering};
  s.dtypes = dtypes;
  return s;
}
constexpr Spec integral(const char* lowering) { return only(lowering, Dtypes::kIntegral); }
constexpr Spec shift(const char* lowering) { return only(lowering, Dtypes::kIntegralNoBool); }
constexpr Spec no_bool(const char* lowering) { return only(lowering, Dtypes::kNoBool); }
// remainder, fmod, floor_divide: no bool, and an integral division by a Python zero raises as on
// the CPU. (A zero inside a divisor tensor is not checked: that needs the device's verdict.)
constexpr Spec division(const char* lowering) {
  Spec s = no_bool(lowering);
  s.divides = true;
  return s;
}

bool supports(Dtypes dtypes, at::ScalarType t) {
  switch (dtypes) {
    case Dtypes::kAll: return true;
    case Dtypes::kIntegral: return c10::isIntegralType(t, /*includeBool=*/true);
    case Dtypes::kIntegralNoBool: return c10::isIntegralType(t, /*includeBool=*/false);
    case Dtypes::kNoBool: return t != at::kBool;
    case Dtypes::kFloating: return c10::isFloatingType(t);
  }
  return true;
}

struct Entry {
  const char* overload;  // "exp.out"
  Spec spec;
};

constexpr uint32_t arg(int i) { return 1u << i; }

const Entry kEntries[] = {
    // unary math: integral inputs compute in float
    {"exp.out", {"exp", Promote::kFloat}},          {"exp2.out", {"exp2", Promote::kFloat}},
    {"expm1.out", {"expm1", Promote::kFloat}},      {"log.out", {"log", Promote::kFloat}},
    {"log2.out", {"log2", Promote::kFloat}},        {"log10.out", {"log10", Promote::kFloat}},
    {"log1p.out", {"log1p", Promote::kFloat}},      {"sqrt.out", {"sqrt", Promote::kFloat}},
    {"rsqrt.out", {"rsqrt", Promote::kFloat}},      {"sin.out", {"sin", Promote::kFloat}},
    {"cos.out", {"cos", Promote::kFloat}},          {"tan.out", {"tan", Promote::kFloat}},
    {"asin.out", {"asin", Promote::kFloat}},        {"acos.out", {"acos", Promote::kFloat}},
    {"atan.out", {"atan", Promote::kFloat}},        {"sinh.out", {"sinh", Promote::kFloat}},
    {"cosh.out", {"cosh", Promote::kFloat}},        {"tanh.out", {"tanh", Promote::kFloat}},
    {"asinh.out", {"asinh", Promote::kFloat}},      {"acosh.out", {"acosh", Promote::kFloat}},
    {"atanh.out", {"atanh", Promote::kFloat}},      {"sigmoid.out", {"sigmoid", Promote::kFloat}},
    {"erf.out", {"erf", Promote::kFloat}},          {"erfc.out", {"erfc", Promote::kFloat}},
    {"erfinv.out", {"erfinv", Promote::kFloat}},    {"lgamma.out", {"lgamma", Promote::kFloat}},
    {"digamma.out", {"digamma", Promote::kFloat}},  {"sinc.out", {"sinc", Promote::kFloat}},
    {"logit.out", {"logit", Promote::kFloat}},     {"logit", {"logit", Promote::kFloat}},
    {"logit_", {"logit", Promote::kFloat}},      {"reciprocal.out", {"reciprocal", Promote::kFloat}},
    // unary, dtype kept
    {"abs.out", no_bool("abs")},                 {"ceil.out", no_bool("ceil")},            {"floor.out", no_bool("floor")},
    {"round.out", no_bool("round")},             {"round.decimals_out", no_bool("round")}, {"trunc.out", no_bool("trunc")},
    {"frac.out", only("frac", Dtypes::kFloating)},               {"sign.out", {"sign"}},            {"sgn.out", {"sign"}},
    {"bitwise_not.out", integral("bitwise_not")}, {"nan_to_num.out", {"nan_to_num"}},
    {"clamp.out", {"clamp"}},             {"clamp.Tensor_out", {"clamp"}},   {"angle.out", {"angle", Promote::kFloat}},
    {"angle", {"angle", Promote::kFloat}},
    {"clamp_min.out", {"clamp_min"}},     {"clamp_min.Tensor_out", {"clamp_min"}},
    {"clamp_max.out", {"clamp_max"}},     {"clamp_max.Tensor_out", {"clamp_max"}},
    {"polygamma.out", {"polygamma", Promote::kFloat}},
    {"special_zeta.out", {"zeta", Promote::kFloat}},
    {"special_zeta.self_scalar_out", {"zeta", Promote::kFloat}},
    {"special_zeta.other_scalar_out", {"zeta", Promote::kFloat}},
    {"rsub.Tensor", {"rsub"}},            {"rsub.Scalar", {"rsub"}},
    // special functions (lowering/special.cc)
    {"i0.out", {"i0", Promote::kFloat}},
    {"special_i0e.out", {"i0e", Promote::kFloat}},
    {"special_i1.out", {"i1", Promote::kFloat}},
    {"special_i1e.out", {"i1e", Promote::kFloat}},
    {"special_modified_bessel_i0.out", {"i0", Promote::kFloat}},
    {"special_modified_bessel_i1.out", {"i1", Promote::kFloat}},
    {"special_modified_bessel_k0.out", {"k0", Promote::kFloat}},
    {"special_modified_bessel_k1.out", {"k1", Promote::kFloat}},
    {"special_scaled_modified_bessel_k0.out", {"k0e", Promote::kFloat}},
    {"special_scaled_modified_bessel_k1.out", {"k1e", Promote::kFloat}},
    {"special_bessel_j0.out", {"j0", Promote::kFloat}},
    {"special_bessel_j1.out", {"j1", Promote::kFloat}},
    {"special_bessel_y0.out", {"y0", Promote::kFloat}},
    {"special_bessel_y1.out", {"y1", Promote::kFloat}},
    {"special_spherical_bessel_j0.out", {"spherical_j0", Promote::kFloat}},
    {"special_airy_ai.out", {"airy_ai", Promote::kFloat}},
    {"igamma.out", {"igamma", Promote::kFloat}},
    {"igammac.out", {"igammac", Promote::kFloat}},
    {"special_entr.out", {"entr", Promote::kFloat}},
    {"special_erfcx.out", {"erfcx", Promote::kFloat}},
    {"special_log_ndtr.out", {"log_ndtr", Promote::kFloat}},
    {"special_ndtri.out", {"ndtri", Promote::kFloat}},
    {"special_xlog1py.out", {"xlog1py", Promote::kFloat}},
    {"special_xlog1py.self_scalar_out", {"xlog1py", Promote::kFloat}},
    {"special_xlog1py.other_scalar_out", {"xlog1py", Promote::kFloat}},
    {"special_chebyshev_polynomial_t.out", {"chebyshev_t", Promote::kFloat}},
    {"special_chebyshev_polynomial_t.x_scalar_out", {"chebyshev_t", Promote::kFloat}},
    {"special_chebyshev_polynomial_t.n_scalar_out", {"chebyshev_t", Promote::kFloat}},
    {"special_chebyshev_polynomial_u.out", {"chebyshev_u", Promote::kFloat}},
    {"special_chebyshev_polynomial_u.x_scalar_out", {"chebyshev_u", Promote::kFloat}},
    {"special_chebyshev_polynomial_u.n_scalar_out", {"chebyshev_u", Promote::kFloat}},
    {"special_chebyshev_polynomial_v.out", {"chebyshev_v", Promote::kFloat}},
    {"special_chebyshev_polynomial_v.x_scalar_out", {"chebyshev_v", Promote::kFloat}},
    {"special_chebyshev_polynomial_v.n_scalar_out", {"chebyshev_v", Promote::kFloat}},
    {"special_chebyshev_polynomial_w.out", {"chebyshev_w", Promote::kFloat}},
    {"special_chebyshev_polynomial_w.x_scalar_out", {"chebyshev_w", Promote::kFloat}},
    {"special_chebyshev_polynomial_w.n_scalar_out", {"chebyshev_w", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_t.out", {"shifted_chebyshev_t", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_t.x_scalar_out", {"shifted_chebyshev_t", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_t.n_scalar_out", {"shifted_chebyshev_t", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_u.out", {"shifted_chebyshev_u", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_u.x_scalar_out", {"shifted_chebyshev_u", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_u.n_scalar_out", {"shifted_chebyshev_u", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_v.out", {"shifted_chebyshev_v", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_v.x_scalar_out", {"shifted_chebyshev_v", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_v.n_scalar_out", {"shifted_chebyshev_v", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_w.out", {"shifted_chebyshev_w", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_w.x_scalar_out", {"shifted_chebyshev_w", Promote::kFloat}},
    {"special_shifted_chebyshev_polynomial_w.n_scalar_out", {"shifted_chebyshev_w", Promote::kFloat}},
    {"special_hermite_polynomial_h.out", {"hermite_h", Promote::kFloat}},
    {"special_hermite_polynomial_h.x_scalar_out", {"hermite_h", Promote::kFloat}},
    {"special_hermite_polynomial_h.n_scalar_out", {"hermite_h", Promote::kFloat}},
    {"special_hermite_polynomial_he.out", {"hermite_he", Promote::kFloat}},
    {"special_hermite_polynomial_he.x_scalar_out", {"hermite_he", Promote::kFloat}},
    {"special_hermite_polynomial_he.n_scalar_out", {"hermite_he", Promote::kFloat}},
    {"special_laguerre_polynomial_l.out", {"laguerre_l", Promote::kFloat}},
    {"special_laguerre_polynomial_l.x_scalar_out", {"laguerre_l", Promote::kFloat}},
    {"special_laguerre_polynomial_l.n_scalar_out", {"laguerre_l", Promote::kFloat}},
    {"special_legendre_polynomial_p.out", {"legendre_p", Promote::kFloat}},
    {"special_legendre_polynomial_p.x_scalar_out", {"legendre_p", Promote::kFloat}},
    {"special_legendre_polynomial_p.n_scalar_out", {"legendre_p", Promote::kFloat}},
    // predicates
    {"isnan", {"isnan", Promote::kCommon, true}},         {"isinf", {"isinf", Promote::kCommon, true}},
    {"signbit.out", {"signbit", Promote::kCommon, true}}, {"isposinf.out", {"isposinf", Promote::kCommon, true}},
    {"isneginf.out", {"isneginf", Promote::kCommon, true}},
    {"isfinite", {"isfinite", Promote::kCommon, true}},
    {"logical_not.out", {"logical_not", Promote::kBool, true}},
    // activations
    {"gelu.out", {"gelu"}},             {"silu.out", {"silu"}},           {"mish.out", {"mish"}},
    {"softplus.out", {"softplus"}},     {"elu.out", {"elu"}},             {"leaky_relu.out", {"leaky_relu"}},
    {"hardtanh", {"hardtanh"}},         {"hardtanh_", {"hardtanh"}},      {"hardtanh.out", {"hardtanh"}},
    {"hardsigmoid.out", {"hardsigmoid"}}, {"hardswish.out", {"hardswish"}}, {"hardswish", {"hardswish"}},
    {"hardswish_", {"hardswish"}},      {"softshrink.out", {"softshrink"}}, {"hardshrink.out", {"hardshrink"}},
    {"threshold.out", {"threshold"}},
    // activation gradients
    {"threshold_backward.grad_input", {"threshold_backward"}},
    {"sigmoid_backward.grad_input", {"sigmoid_backward"}},
    {"tanh_backward.grad_input", {"tanh_backward"}},
    {"gelu_backward.grad_input", {"gelu_backward"}},
    {"silu_backward.grad_input", {"silu_backward"}},
    {"mish_backward", {"mish_backward"}},
    {"leaky_relu_backward.grad_input", {"leaky_relu_backward"}},
    {"elu_backward.grad_input", {"elu_backward"}},
    {"softplus_backward.grad_input", {"softplus_backward"}},
    {"hardtanh_backward", {"hardtanh_backward"}},
    {"hardtanh_backward.grad_input", {"hardtanh_backward"}},
    {"hardsigmoid_backward.grad_input", {"hardsigmoid_backward"}},
    {"hardswish_backward", {"hardswish_backward"}},
    {"softshrink_backward.grad_input", {"softshrink_backward"}},
    {"hardshrink_backward.grad_input", {"hardshrink_backward"}},
    {"logit_backward.grad_input", {"logit_backward"}},
    {"log_sigmoid_backward", {"log_sigmoid_backward"}},
    {"log_sigmoid_backward.grad_input", {"log_sigmoid_backward"}},
    // binary arithmetic
    {"remainder.Tensor_out", division("remainder")}, {"remainder.Scalar_out", division("remainder")},
    {"fmod.Tensor_out", division("fmod")},           {"fmod.Scalar_out", division("fmod")},
    {"floor_divide", division("floor_divide")},      {"floor_divide_.Tensor", division("floor_divide")},
    {"floor_divide.out", division("floor_divide")},  {"floor_divide.Scalar", division("floor_divide")},
    {"floor_divide_.Scalar", division("floor_divide")},
    {"pow.Tensor_Tensor_out", no_bool("pow")},      {"pow.Scalar_out", no_bool("pow")},
    {"atan2.out", {"atan2", Promote::kFloat}}, {"maximum.out", {"maximum"}}, {"minimum.out", {"minimum"}},
    {"fmax.out", {"fmax"}},                  {"fmin.out", {"fmin"}},
    {"copysign.out", {"copysign", Promote::kFloat}}, {"copysign.Scalar_out", {"copysign", Promote::kFloat}},
    {"hypot.out", only("hypot", Dtypes::kFloating)},                {"logaddexp.out", {"logaddexp", Promote::kFloat}},
    {"logaddexp2.out", {"logaddexp2", Promote::kFloat}},
    {"xlogy.OutTensor", {"xlogy", Promote::kFloat}}, {"xlogy.OutScalar_Self", {"xlogy", Promote::kFloat}},
    {"xlogy.OutScalar_Other", {"xlogy", Promote::kFloat}},
    {"nextafter.out", {"nextafter"}},        {"heaviside.out", {"heaviside"}},
    {"bitwise_and.Tensor_out", integral("bitwise_and")}, {"bitwise_or.Tensor_out", integral("bitwise_or")},
    {"bitwise_xor.Tensor_out", integral("bitwise_xor")},
    {"gcd.out", shift("gcd")}, {"lcm.out", shift("lcm")},
    {"bitwise_left_shift.Tensor_out", shift("bitwise_left_shift")},
    {"bitwise_right_shift.Tensor_out", shift("bitwise_right_shift")},
    // the operator forms (x >> n, x << n, x >>= n, x <<= n) are separate, non-structured ops
    {"__rshift__.Scalar", shift("bitwise_right_shift")},  {"__rshift__.Tensor", shift("bitwise_right_shift")},
    {"__irshift__.Scalar", shift("bitwise_right_shift")}, {"__irshift__.Tensor", shift("bitwise_right_shift")},
    {"__lshift__.Scalar", shift("bitwise_left_shift")},   {"__lshift__.Tensor", shift("bitwise_left_shift")},
    {"__ilshift__.Scalar", shift("bitwise_left_shift")},  {"__ilshift__.Tensor", shift("bitwise_left_shift")},
    // comparisons and logic
    {"eq.Tensor_out", {"eq", Promote::kCommon, true}}, {"eq.Scalar_out", {"eq", Promote::kCommon, true}},
    {"ne.Tensor_out", {"ne", Promote::kCommon, true}}, {"ne.Scalar_out", {"ne", Promote::kCommon, true}},
    {"lt.Tensor_out", {"lt", Promote::kCommon, true}}, {"lt.Scalar_out", {"lt", Promote::kCommon, true}},
    {"le.Tensor_out", {"le", Promote::kCommon, true}}, {"le.Scalar_out", {"le", Promote::kCommon, true}},
    {"gt.Tensor_out", {"gt", Promote::kCommon, true}}, {"gt.Scalar_out", {"gt", Promote::kCommon, true}},
    {"ge.Tensor_out", {"ge", Promote::kCommon, true}}, {"ge.Scalar_out", {"ge", Promote::kCommon, true}},
    {"logical_and.out", {"logical_and", Promote::kBool, true}},
    {"logical_or.out", {"logical_or", Promote::kBool, true}},
    {"logical_xor.out", {"logical_xor", Promote::kBool, true}},
    // ternary
    {"lerp.Scalar_out", {"lerp"}},   {"lerp.Tensor_out", {"lerp"}},
    {"addcmul.out", {"addcmul"}},    {"addcdiv.out", {"addcdiv"}},
    {"where.self", {"where", Promote::kCommon, false, arg(0)}},
    {"where.self_out", {"where", Promote::kCommon, false, arg(0)}},
    {"masked_fill_.Scalar", {"masked_fill", Promote::kSelf, false, arg(1)}},
    {"masked_fill_.Tensor", {"masked_fill", Promote::kSelf, false, arg(1)}},
};

// How an argument reaches the lowering.
enum class ArgKind : uint8_t { kTensor, kScalar, kAttr, kOut };

c10::TypeKind base_kind(const c10::Argument& a) {
  const c10::TypePtr& t = a.type();
  return t->kind() == c10::TypeKind::OptionalType ? t->containedType(0)->kind() : t->kind();
}

// Per-overload facts derived once from the schema.
struct Plan {
  std::vector<ArgKind> kinds;
  std::vector<bool> promotes;  // takes part in type promotion
  const Spec* spec;
  std::string label;
  bool inplace = false;  // first argument is written (foo_)
  int out_index = -1;    // the out= argument, if any
};

const Plan& plan_for(const c10::OperatorHandle& op) {
  static std::mutex mu;
  static std::unordered_map<const void*, Plan> plans;
  static const std::unordered_map<std::string, const Spec*> specs = [] {
    std::unordered_map<std::string, const Spec*> m;
    for (const Entry& e : kEntries) m.emplace(std::string("aten::") + e.overload, &e.spec);
    return m;
  }();
  std::lock_guard<std::mutex> lock(mu);
  const void* key = &op.schema();
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  const auto& schema = op.schema();
  const std::string full = schema.name() + (schema.overload_name().empty() ? "" : "." + schema.overload_name());
  Plan p;
  p.spec = specs.at(full);
  p.label = full;
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].is_out()) p.out_index = static_cast<int>(i);
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::TypeKind k = base_kind(args[i]);
    ArgKind kind;
    if (args[i].is_out()) {
      kind = ArgKind::kOut;
    } else if (k == c10::TypeKind::TensorType) {
      kind = ArgKind::kTensor;
    } else if (k == c10::TypeKind::NumberType || k == c10::TypeKind::FloatType) {
      kind = ArgKind::kScalar;
    } else {
      TORCH_CHECK(k == c10::TypeKind::IntType || k == c10::TypeKind::BoolType || k == c10::TypeKind::StringType,
                  full, ": argument '", args[i].name(), "' has a type the pointwise kernel does not handle");
      kind = ArgKind::kAttr;
    }
    p.kinds.push_back(kind);
    p.promotes.push_back((kind == ArgKind::kTensor || k == c10::TypeKind::NumberType) &&
                         !(p.spec->mask_args & arg(static_cast<int>(i))));
  }
  p.inplace = p.out_index < 0 && !args.empty() && args[0].alias_info() != nullptr &&
              args[0].alias_info()->isWrite();
  return plans.emplace(key, std::move(p)).first->second;
}

void pointwise_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const Plan& plan = plan_for(op);
  const Spec& spec = *plan.spec;
  const auto& schema_args = op.schema().arguments();
  const size_t n = schema_args.size();
  auto ivalues = torch::jit::last(*stack, n);

  // Compute dtype and result shape from the inputs.
  at::native::ResultTypeState state;
  at::DimVector shape;  // inline: no allocation per op
  const int last_input = plan.out_index >= 0 ? plan.out_index : static_cast<int>(n);
  for (int i = 0; i < last_input; ++i) {
    const c10::IValue& v = ivalues[i];
    if (v.isNone()) continue;
    if (v.isTensor()) shape = at::infer_size_dimvector(shape, v.toTensor().sizes());
    if (!plan.promotes[i]) continue;
    state = v.isTensor() ? at::native::update_result_type_state(v.toTensor(), state)
                         : at::native::update_result_type_state(v.toScalar(), state);
  }
  at::ScalarType compute = at::native::result_type(state);
  switch (spec.promote) {
    case Promote::kCommon: break;
    case Promote::kFloat: compute = integral_to_float(compute); break;
    case Promote::kSelf: compute = ivalues[0].toTensor().scalar_type(); break;
    case Promote::kBool: compute = at::kBool; break;
  }
  // Where the CPU has no kernel for the dtype, the same NotImplementedError (not a compile error
  // or a made-up result).
  TORCH_CHECK_NOT_IMPLEMENTED(supports(spec.dtypes, compute),
                              "\"", spec.lowering, "\" not implemented for '", c10::toString(compute), "'");
  if (spec.divides && c10::isIntegralType(compute, /*includeBool=*/false) && n > 1) {
    // A divisor known on the host: a Python number, or the 0-dim CPU tensor ATen wraps it in.
    const c10::IValue& d = ivalues[1];
    const bool on_host = d.isScalar() || (d.isTensor() && d.toTensor().device().is_cpu() && d.toTensor().dim() == 0);
    const bool empty = ivalues[0].isTensor() && ivalues[0].toTensor().numel() == 0;  // the CPU never divides
    TORCH_CHECK(empty || !on_host || !(d.isScalar() ? d.toScalar() : d.toTensor().item()).equal(0), "ZeroDivisionError");
  }
  if (c10::isComplexType(compute) && complex_pointwise(op, stack, spec.lowering)) return;
  const at::ScalarType result_dtype = spec.bool_result ? at::kBool : compute;

  OpRunner r(spec.lowering, plan.label.c_str());
  int64_t present = 0;
  for (int i = 0; i < last_input; ++i) {
    const c10::IValue& v = ivalues[i];
    const std::string& name = schema_args[i].name();
    if (v.isNone()) continue;
    present |= int64_t{1} << i;
    switch (plan.kinds[i]) {
      case ArgKind::kTensor:
        r.input(v.toTensor(), (spec.mask_args & arg(i)) ? at::kBool : compute);
        break;
      case ArgKind::kScalar:
        r.scalar(v.toScalar(), compute);
        break;
      case ArgKind::kAttr:
        if (v.isInt()) r.attrs().set_int(name.c_str(), v.toInt());
        else if (v.isBool()) r.attrs().set_bool(name.c_str(), v.toBool());
        else r.attrs().set_string(name.c_str(), v.toStringRef());
        break;
      case ArgKind::kOut:
        break;
    }
  }
  r.attrs().set_int("present", present);

  at::Tensor result;
  if (plan.inplace) {
    result = ivalues[0].toTensor();
    if (!spec.bool_result) check_can_cast(result_dtype, result);
    r.run_into(result);
  } else if (plan.out_index >= 0) {
    result = ivalues[plan.out_index].toTensor();
    if (!spec.bool_result) check_can_cast(result_dtype, result);
    at::native::resize_output(result, shape);
    r.run_into(result);
  } else {
    const at::Tensor& first = [&]() -> const at::Tensor& {
      for (int i = 0; i < last_input; ++i) {
        if (ivalues[i].isTensor() && ivalues[i].toTensor().is_privateuseone()) return ivalues[i].toTensor();
      }
      TORCH_CHECK(false, plan.label, ": no tpu tensor argument");
    }();
    result = empty_on(shape, result_dtype, tpu_index(first));
    r.run_into(result);
  }
  torch::jit::drop(*stack, n);
  stack->emplace_back(std::move(result));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const Entry& e : kEntries) {
    m.impl(e.overload, torch::CppFunction::makeFromBoxedFunction<&pointwise_kernel>());
  }
}

}  // namespace
}  // namespace tpu::aten
