#include "aten/out_variants.h"

#include <ATen/native/Resize.h>

#include "aten/type_promotion.h"

namespace tpu::aten {

at::Tensor& write_out(const at::Tensor& result, at::Tensor& out) {
  check_can_cast(result.scalar_type(), out);
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

}  // namespace tpu::aten
