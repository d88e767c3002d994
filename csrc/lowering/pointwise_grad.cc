// Backward formulas of pointwise activations (the aten *_backward ops autograd calls).
// Argument order follows each aten schema: grad first.
#include <cmath>

#include "lowering/hlo_names.h"
#include "lowering/pointwise.h"

namespace tpu::lowering {
namespace {

using Args = std::vector<Value>;

Value one(Builder& b, Value like) { return scalar_like(b, like, 1); }
Value zero(Builder& b, Value like) { return scalar_like(b, like, 0); }
Value sigmoid(Builder& b, Value x) { return b.unary("stablehlo.logistic", x); }

// d/dx gelu
Value gelu_grad(Context& ctx, const Args& a) {
  auto& b = ctx.b;
  Value g = a[0], x = a[1];
  if (ctx.attrs.get_string("approximate") == "tanh") {
    const double k_beta = std::sqrt(2.0 / M_PI), k_kappa = 0.044715;
    Value x2 = b.mul(x, x);
    Value inner = b.mul(scalar_like(b, x, k_beta), b.add(x, b.mul(scalar_like(b, x, k_kappa), b.mul(x2, x))));
    Value t = b.unary("stablehlo.tanh", inner);
    Value left = b.mul(scalar_like(b, x, 0.5), x);
    Value right = b.add(one(b, x), t);
    Value left_d = b.mul(scalar_like(b, x, 0.5), right);
    Value tanh_d = b.sub(one(b, x), b.mul(t, t));
    Value inner_d = b.mul(scalar_like(b, x, k_beta), b.add(one(b, x), b.mul(scalar_like(b, x, 3 * k_kappa), x2)));
    Value right_d = b.mul(b.mul(left, tanh_d), inner_d);
    return b.mul(g, b.add(left_d, right_d));
  }
  Value cdf = b.mul(scalar_like(b, x, 0.5),
                    b.add(one(b, x), b.unary("chlo.erf", b.mul(x, scalar_like(b, x, M_SQRT1_2)))));
  Value pdf = b.mul(scalar_like(b, x, 0.5 * M_2_SQRTPI * M_SQRT1_2),
                    b.unary("stablehlo.exponential", b.mul(scalar_like(b, x, -0.5), b.mul(x, x))));
  return b.mul(g, b.add(cdf, b.mul(x, pdf)));
}

// elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result)
Value elu_grad(Context& ctx, const Args& a) {
  auto& b = ctx.b;
  Value g = a[0], alpha = a[1], scale = a[2], input_scale = a[3], v = a[4];
  Value neg_grad;
  if (ctx.attrs.get_bool("is_result")) {
    neg_grad = b.mul(b.mul(g, input_scale), b.add(v, b.mul(alpha, scale)));
  } else {
    neg_grad = b.mul(b.mul(b.mul(g, input_scale), b.mul(alpha, scale)),
                     b.unary("stablehlo.exponential", b.mul(v, input_scale)));
  }
  return b.select(b.compare(v, zero(b, v), Compare::kLE), neg_grad, b.mul(g, scale));
}

const PointwiseEntry kGrad[] = {
    // threshold_backward(grad, self, threshold): 0 where self <= threshold, else grad (NaN too)
    {"threshold_backward", [](Context& c, const Args& a) {
       return c.b.select(c.b.compare(a[1], a[2], Compare::kLE), zero(c.b, a[0]), a[0]);
     }},
    {"sigmoid_backward", [](Context& c, const Args& a) {  // (grad, output)
       auto& b = c.b;
       return b.mul(a[0], b.mul(b.sub(one(b, a[1]), a[1]), a[1]));
     }},
    {"tanh_backward", [](Context& c, const Args& a) {  // (grad, output)
       auto& b = c.b;
       return b.mul(a[0], b.sub(one(b, a[1]), b.mul(a[1], a[1])));
     }},
    {"gelu_backward", gelu_grad},
    {"silu_backward", [](Context& c, const Args& a) {  // (grad, self)
       auto& b = c.b;
       Value s = sigmoid(b, a[1]);
       return b.mul(a[0], b.mul(s, b.add(one(b, s), b.mul(a[1], b.sub(one(b, s), s)))));
     }},
    {"mish_backward", [](Context& c, const Args& a) {  // (grad, self)
       auto& b = c.b;
       Value x = a[1];
       Value sp = b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", x));
       Value t = b.unary("stablehlo.tanh", sp);
       return b.mul(a[0], b.add(t, b.mul(b.mul(x, sigmoid(b, x)), b.sub(one(b, t), b.mul(t, t)))));
     }},
    {"leaky_relu_backward", [](Context& c, const Args& a) {  // (grad, self, slope)
       auto& b = c.b;
       return b.select(b.compare(a[1], zero(b, a[1]), Compare::kGT), a[0], b.mul(a[0], a[2]));
     }},
    {"elu_backward", elu_grad},
    {"softplus_backward", [](Context& c, const Args& a) {  // (grad, self, beta, threshold)
       auto& b = c.b;
       Value z = b.unary("stablehlo.exponential", b.mul(a[1], a[2]));
       Value soft = b.mul(a[0], b.div(z, b.add(z, one(b, z))));
       return b.select(b.compare(b.mul(a[1], a[2]), a[3], Compare::kGT), a[0], soft);
     }},
    {"hardtanh_backward", [](Context& c, const Args& a) {  // (grad, self, min, max)
       auto& b = c.b;
       Value out = logical_or(b, b.compare(a[1], a[2], Compare::kLE), b.compare(a[1], a[3], Compare::kGE));
       return b.select(out, zero(b, a[0]), a[0]);
     }},
    {"hardsigmoid_backward", [](Context& c, const Args& a) {  // (grad, self)
       auto& b = c.b;
       Value in = logical_and(b, b.compare(a[1], scalar_like(b, a[1], -3), Compare::kGT),
                              b.compare(a[1], scalar_like(b, a[1], 3), Compare::kLT));
       return b.select(in, b.div(a[0], scalar_like(b, a[0], 6)), zero(b, a[0]));
     }},
    {"hardswish_backward", [](Context& c, const Args& a) {  // (grad, self)
       auto& b = c.b;
       Value x = a[1];
       Value mid = b.mul(a[0], b.add(b.div(x, scalar_like(b, x, 3)), scalar_like(b, x, 0.5)));
       Value r = b.select(b.compare(x, scalar_like(b, x, 3), Compare::kLE), mid, a[0]);
       return b.select(b.compare(x, scalar_like(b, x, -3), Compare::kLT), zero(b, a[0]), r);
     }},
    {"softshrink_backward", [](Context& c, const Args& a) {  // (grad, self, lambd)
       auto& b = c.b;
       Value in = logical_and(b, b.compare(a[1], b.neg(a[2]), Compare::kGE), b.compare(a[1], a[2], Compare::kLE));
       return b.select(in, zero(b, a[0]), a[0]);
     }},
    {"hardshrink_backward", [](Context& c, const Args& a) {  // (grad, self, lambd)
       auto& b = c.b;
       Value in = logical_and(b, b.compare(a[1], b.neg(a[2]), Compare::kGE), b.compare(a[1], a[2], Compare::kLE));
       return b.select(in, zero(b, a[0]), a[0]);
     }},
    {"logit_backward", [](Context& c, const Args& a) {  // (grad, self, eps?)
       auto& b = c.b;
       Value x = a[1];
       Value r = b.div(a[0], b.mul(x, b.sub(one(b, x), x)));
       if (has_arg(c.attrs, 2)) {
         Value eps = a[2];
         Value out = logical_or(b, b.compare(x, eps, Compare::kLT), b.compare(x, b.sub(one(b, x), eps), Compare::kGT));
         r = b.select(out, zero(b, r), r);
       }
       return r;
     }},
    {"log_sigmoid_backward", [](Context& c, const Args& a) {  // (grad, self, buffer)
       auto& b = c.b;
       return b.mul(a[0], sigmoid(b, b.neg(a[1])));
     }},
};

TPU_REGISTER_POINTWISE(kGrad);

}  // namespace
}  // namespace tpu::lowering
