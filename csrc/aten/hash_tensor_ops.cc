// hash_tensor.out: xor of every element's 64-bit pattern (floats widened to float64, integers
// and bool to int64) over the given dims, as uint64 - PyTorch's mode 0, the only one it has.
#include <ATen/WrapDimUtilsMulti.h>
#include <torch/library.h>

#include "aten/op_runner.h"
#include "aten/out_variants.h"

namespace tpu::aten {
namespace {

using Dims = std::vector<int64_t>;

// Sorted, wrapped dims; an empty list means every dim (duplicates raise like on the CPU).
Dims hashed_dims(const at::Tensor& self, at::IntArrayRef dim) {
  const int64_t rank = self.dim();
  Dims dims;
  if (dim.empty()) {
    for (int64_t i = 0; i < rank; ++i) dims.push_back(i);
    return dims;
  }
  const auto mask = at::dim_list_to_bitset(dim, std::max<int64_t>(rank, 1));
  for (int64_t i = 0; i < rank; ++i) {
    if (mask[i]) dims.push_back(i);
  }
  return dims;
}

at::Tensor& k_hash_tensor_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, int64_t mode, at::Tensor& out) {
  TORCH_CHECK(mode == 0, "hash_tensor: only mode=0 (xor reduction) is supported, got mode=", mode);
  TORCH_CHECK(!self.is_complex(), "hash_tensor: complex inputs are not supported");
  const at::ScalarType wide = at::isFloatingType(self.scalar_type()) ? at::kDouble : at::kLong;
  OpRunner r("hash_tensor", "aten::hash_tensor.out");
  r.input(self, wide);
  r.attrs().set_ints("dims", hashed_dims(self, dim)).set_bool("keepdim", keepdim);
  return write_out(r.run1(), out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("hash_tensor.out", k_hash_tensor_out); }

}  // namespace
}  // namespace tpu::aten
