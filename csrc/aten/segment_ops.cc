// segment_reduce: reduces consecutive runs (given by lengths or offsets) along `axis` with
// sum, prod, max, min or mean, as tpu searchsorted + scatter_reduce. Empty segments hold
// `initial`, or the reduction's identity (NaN for mean), as on the CPU.
#include <ATen/WrapDimUtils.h>
#include <torch/library.h>

#include <limits>

namespace tpu::aten {
namespace {

at::Tensor k_segment_reduce(const at::Tensor& data, c10::string_view reduce, const std::optional<at::Tensor>& lengths_in,
                            const std::optional<at::Tensor>& indices, const std::optional<at::Tensor>& offsets,
                            int64_t axis, bool unsafe, const std::optional<at::Scalar>& initial) {
  TORCH_CHECK(!(indices.has_value() && indices->defined()), "segment_reduce(): indices based reduction is not supported yet.");
  const bool has_lengths = lengths_in.has_value() && lengths_in->defined();
  const bool has_offsets = offsets.has_value() && offsets->defined();
  TORCH_CHECK(has_lengths || has_offsets, "segment_reduce(): Either lengths or offsets must be defined");
  at::Tensor lengths = has_lengths ? *lengths_in : offsets->narrow(-1, 1, offsets->size(-1) - 1) - offsets->narrow(-1, 0, offsets->size(-1) - 1);
  axis = at::maybe_wrap_dim(axis, data.dim());
  TORCH_CHECK(axis == lengths.dim() - 1, "segment_reduce(): Expected axis to be the last dimension of lengths but got ", axis, ".");
  const std::string op(reduce);
  TORCH_CHECK(op == "sum" || op == "prod" || op == "max" || op == "min" || op == "mean",
              "segment_reduce(): unsupported reduction '", op, "'; use one of sum, prod, max, min, mean");
  const int64_t n = data.size(axis), segments = lengths.size(-1);
  lengths = lengths.to(at::kLong);
  std::vector<int64_t> out_shape = data.sizes().vec();
  out_shape[axis] = segments;
  if (segments == 0) return at::empty(out_shape, data.options());
  // segment id of every position along axis: the first segment end beyond it
  at::Tensor ends = at::cumsum(lengths, -1);
  if (!unsafe) {
    TORCH_CHECK((lengths >= 0).all().item<bool>(), "segment_reduce(): lengths contains negative value!");
    TORCH_CHECK((ends.select(-1, -1) == n).all().item<bool>(),  // host reads, as on the CPU
                "segment_reduce(): Expected all rows of lengths along axis to sum to data.size(lengths.dim()-1) when !unsafe.");
  }
  std::vector<int64_t> pos_shape(lengths.sizes().begin(), lengths.sizes().end() - 1);
  pos_shape.push_back(n);
  at::Tensor positions = at::arange(n, lengths.options()).expand(pos_shape).contiguous();
  at::Tensor seg = at::searchsorted(ends, positions, false, /*right=*/true);
  for (int64_t d = axis + 1; d < data.dim(); ++d) seg = seg.unsqueeze(-1);
  // With unsafe, lengths may cover fewer than n positions; those land in one extra segment
  // that is dropped below, as the CPU ignores them.
  seg = seg.expand(data.sizes());

  const double inf = std::numeric_limits<double>::infinity();
  double identity = 0;
  if (op == "prod") identity = 1;
  if (op == "max") identity = -inf;
  if (op == "min") identity = inf;
  const at::Scalar fill = initial.has_value() ? *initial : at::Scalar(identity);
  std::vector<int64_t> scatter_shape = out_shape;
  scatter_shape[axis] = segments + 1;
  at::Tensor out = at::full(scatter_shape, fill, data.options());
  if (op == "sum" || op == "mean") {
    out = out.scatter_add(axis, seg, data);
  } else {
    out = out.scatter_reduce(axis, seg, data, op == "prod" ? "prod" : (op == "max" ? "amax" : "amin"), /*include_self=*/true);
  }
  out = out.narrow(axis, 0, segments);
  if (op == "mean") {
    at::Tensor count = lengths;
    for (int64_t d = axis + 1; d < data.dim(); ++d) count = count.unsqueeze(-1);
    count = count.to(data.scalar_type());
    at::Tensor empty_value = at::full({}, initial.has_value() ? *initial : at::Scalar(std::nan("")), data.options());
    out = at::where(count == 0, empty_value, out / count);
  }
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("segment_reduce", k_segment_reduce); }

}  // namespace
}  // namespace tpu::aten
