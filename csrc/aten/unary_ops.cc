// neg and relu: hot ops with direct kernels (the generic pointwise kernel serves the rest).
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/out_variants.h"
#include "aten/type_promotion.h"

namespace tpu::aten {
namespace {

at::Tensor k_neg(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool,
              "Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
              "to invert a mask, use the `~` or `logical_not()` operator instead.");
  return OpRunner("neg", "aten::neg").input(self).run1();
}
at::Tensor& k_neg_(at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Negation, the `-` operator, on a bool tensor is not supported.");
  OpRunner("neg", "aten::neg_").input(self).run_into(self);
  return self;
}
at::Tensor& k_neg_out(const at::Tensor& self, at::Tensor& out) { return write_out(k_neg(self), out); }

at::Tensor k_relu(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return OpRunner("relu", "aten::relu").input(self).run1();
}
at::Tensor& k_relu_(at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  OpRunner("relu", "aten::relu_").input(self).run_into(self);
  return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("neg", k_neg);
  m.impl("neg_", k_neg_);
  m.impl("neg.out", k_neg_out);
  m.impl("relu", k_relu);
  m.impl("relu_", k_relu_);
}

}  // namespace
}  // namespace tpu::aten
