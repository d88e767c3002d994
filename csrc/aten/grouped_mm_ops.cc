// torch._grouped_mm (torch.nn.functional.grouped_mm) on the device: one program per shape, no host
// read of the offsets (lowering/grouped_mm.cc). Autograd uses PyTorch's formula, which calls
// _grouped_mm again with the operands transposed.
#include <torch/library.h>

#include "aten/op_runner.h"

namespace tpu::aten {
namespace {

at::Tensor k_grouped_mm(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& offs,
                        const std::optional<at::Tensor>& bias, std::optional<at::ScalarType> out_dtype) {
  TORCH_CHECK(a.dim() == 2 || a.dim() == 3, "grouped_mm: mat_a must be 2D or 3D, got ", a.dim(), "D");
  TORCH_CHECK(b.dim() == 2 || b.dim() == 3, "grouped_mm: mat_b must be 2D or 3D, got ", b.dim(), "D");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "grouped_mm: mat_a and mat_b must have the same dtype, got ",
              a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(at::isFloatingType(a.scalar_type()), "grouped_mm: expected floating-point inputs, got ",
              a.scalar_type());
  TORCH_CHECK(!bias.has_value() || !bias->defined(), "grouped_mm: bias is not supported yet");
  TORCH_CHECK(a.size(-1) == b.size(-2), "grouped_mm: contraction dimension of mat_a and mat_b must match, got ",
              a.sizes(), " and ", b.sizes());
  const bool jagged = a.dim() == 2 || b.dim() == 2;
  const bool has_offs = offs.has_value() && offs->defined();
  TORCH_CHECK(jagged == has_offs, jagged ? "grouped_mm: offsets are needed for 2D multiplicands"
                                         : "grouped_mm: offsets are not used with two 3D multiplicands");
  if (has_offs) {
    TORCH_CHECK(offs->dim() == 1 && offs->scalar_type() == at::kInt, "grouped_mm: offsets must be a 1D int32 tensor");
    TORCH_CHECK(offs->device() == a.device(), "grouped_mm: offsets must be on ", a.device(), ", got ", offs->device());
    const int64_t groups = a.dim() == 3 ? a.size(0) : b.dim() == 3 ? b.size(0) : offs->size(0);
    TORCH_CHECK(offs->size(0) == groups, "grouped_mm: ", offs->size(0), " offsets for ", groups, " groups");
    TORCH_CHECK(groups > 0, "grouped_mm: needs at least one group");
  } else {
    TORCH_CHECK(a.size(0) == b.size(0), "grouped_mm: batch sizes must match, got ", a.sizes(), " and ", b.sizes());
  }
  const at::ScalarType out = out_dtype.value_or(a.scalar_type());
  const bool out_float32 = out == at::kFloat && a.scalar_type() != at::kFloat;
  TORCH_CHECK(out == a.scalar_type() || (out_float32 && at::isReducedFloatingType(a.scalar_type())),
              "grouped_mm: out_dtype ", out, " is not supported for ", a.scalar_type(), " inputs");
  OpRunner r("grouped_mm", "aten::_grouped_mm");
  r.input(a).input(b);
  if (has_offs) r.input(*offs);
  r.attrs().set_bool("out_float32", out_float32);
  return r.run1();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_grouped_mm", k_grouped_mm);
}

}  // namespace
}  // namespace tpu::aten
