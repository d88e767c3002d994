// segment_reduce: reduces consecutive runs (given by lengths or offsets) along `axis` with
// sum, prod, max, min or mean, as tpu searchsorted + scatter_reduce. Empty segments hold
// `initial`, or the reduction's identity (NaN for mean), as on the CPU. Its backward
// (_segment_reduce_backward) gathers each segment's gradient back to the segment's elements
// with ATen's rules for ties (max/min) and zeros (prod).
#include <ATen/WrapDimUtils.h>
#include <torch/library.h>

#include <limits>

namespace tpu::aten {
namespace {

// The segment lengths (int64) from `lengths` or `offsets`, checked against `data` and `axis`.
at::Tensor segment_lengths(const at::Tensor& data, const std::optional<at::Tensor>& lengths_in,
                           const std::optional<at::Tensor>& offsets, int64_t axis) {
  const bool has_lengths = lengths_in.has_value() && lengths_in->defined();
  const bool has_offsets = offsets.has_value() && offsets->defined();
  TORCH_CHECK(has_lengths || has_offsets, "segment_reduce(): Either lengths or offsets must be defined");
  at::Tensor lengths = has_lengths ? *lengths_in : offsets->narrow(-1, 1, offsets->size(-1) - 1) - offsets->narrow(-1, 0, offsets->size(-1) - 1);
  TORCH_CHECK(axis == lengths.dim() - 1, "segment_reduce(): Expected axis to be the last dimension of lengths but got ", axis, ".");
  return lengths.to(at::kLong);
}

void check_reduction(const std::string& op) {
  TORCH_CHECK(op == "sum" || op == "prod" || op == "max" || op == "min" || op == "mean",
              "segment_reduce(): unsupported reduction '", op, "'; use one of sum, prod, max, min, mean");
}

// The segment id of every element of `data` along `axis` (the first segment end beyond its
// position), broadcast to data's shape. With unsafe lengths that cover fewer than n positions,
// the rest get the id `segments` (one extra segment, which the CPU ignores).
at::Tensor segment_ids(const at::Tensor& lengths, const at::Tensor& data, int64_t axis) {
  const int64_t n = data.size(axis);
  std::vector<int64_t> pos_shape(lengths.sizes().begin(), lengths.sizes().end() - 1);
  pos_shape.push_back(n);
  at::Tensor positions = at::arange(n, lengths.options()).expand(pos_shape).contiguous();
  at::Tensor seg = at::searchsorted(at::cumsum(lengths, -1), positions, false, /*right=*/true);
  for (int64_t d = axis + 1; d < data.dim(); ++d) seg = seg.unsqueeze(-1);
  return seg.expand(data.sizes());
}

// `per_segment` (one entry per segment along axis) with one extra segment holding `fill`,
// read at every element's segment id.
at::Tensor gather_segments(const at::Tensor& per_segment, const at::Tensor& seg, int64_t axis, const at::Scalar& fill) {
  std::vector<int64_t> one = per_segment.sizes().vec();
  one[axis] = 1;
  at::Tensor padded = at::cat({per_segment, at::full(one, fill, per_segment.options())}, axis);
  return padded.gather(axis, seg);
}

// Per-segment sums of `values` (shaped like the elements), read back at every element.
at::Tensor segment_sum_at(const at::Tensor& values, const at::Tensor& seg, int64_t axis, int64_t segments) {
  std::vector<int64_t> shape = values.sizes().vec();
  shape[axis] = segments + 1;
  return at::zeros(shape, values.options()).scatter_add(axis, seg, values).gather(axis, seg);
}

at::Tensor k_segment_reduce(const at::Tensor& data, c10::string_view reduce, const std::optional<at::Tensor>& lengths_in,
                            const std::optional<at::Tensor>& indices, const std::optional<at::Tensor>& offsets,
                            int64_t axis, bool unsafe, const std::optional<at::Scalar>& initial) {
  TORCH_CHECK(!(indices.has_value() && indices->defined()), "segment_reduce(): indices based reduction is not supported yet.");
  axis = at::maybe_wrap_dim(axis, data.dim());
  at::Tensor lengths = segment_lengths(data, lengths_in, offsets, axis);
  const std::string op(reduce);
  check_reduction(op);
  const int64_t n = data.size(axis), segments = lengths.size(-1);
  std::vector<int64_t> out_shape = data.sizes().vec();
  out_shape[axis] = segments;
  if (segments == 0) return at::empty(out_shape, data.options());
  if (!unsafe) {
    TORCH_CHECK((lengths >= 0).all().item<bool>(), "segment_reduce(): lengths contains negative value!");
    TORCH_CHECK((lengths.sum(-1) == n).all().item<bool>(),  // host reads, as on the CPU
                "segment_reduce(): Expected all rows of lengths along axis to sum to data.size(lengths.dim()-1) when !unsafe.");
  }
  const at::Tensor seg = segment_ids(lengths, data, axis);

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

// ATen's formulas per reduction: sum copies the segment's gradient to its elements, mean
// divides it by the segment's length; max/min give it to the elements equal to the result (or
// NaN), shared equally among ties; prod gives grad * result / x, and to a zero or NaN element
// grad times the product of the segment's other elements (and `initial`).
at::Tensor k_segment_reduce_backward(const at::Tensor& grad, const at::Tensor& output, const at::Tensor& data,
                                     c10::string_view reduce, const std::optional<at::Tensor>& lengths_in,
                                     const std::optional<at::Tensor>& offsets, int64_t axis,
                                     const std::optional<at::Scalar>& initial) {
  axis = at::maybe_wrap_dim(axis, data.dim());
  const at::Tensor lengths = segment_lengths(data, lengths_in, offsets, axis);
  const std::string op(reduce);
  check_reduction(op);
  const int64_t segments = lengths.size(-1);
  if (segments == 0 || data.numel() == 0) return at::zeros_like(data);
  const at::Tensor seg = segment_ids(lengths, data, axis);
  const at::Tensor g = gather_segments(grad.contiguous(), seg, axis, 0);
  if (op == "sum") return g;
  if (op == "mean") {
    at::Tensor count = lengths;
    for (int64_t d = axis + 1; d < data.dim(); ++d) count = count.unsqueeze(-1);
    count = count.to(data.scalar_type()).expand(grad.sizes()).contiguous();
    return g / gather_segments(count, seg, axis, 1);
  }
  const at::Tensor result = gather_segments(output.contiguous(), seg, axis, 0);
  const at::Tensor nan = data.isnan();
  if (op == "max" || op == "min") {
    const at::Tensor hit = nan.logical_or(data == result);
    const at::Tensor ties = segment_sum_at(hit.to(data.scalar_type()), seg, axis, segments);
    return at::where(hit, g / ties.clamp_min(1), at::zeros({}, data.options()));
  }
  // prod
  const at::Tensor zero = data == 0;
  const at::Tensor special = zero.logical_or(nan);
  std::vector<int64_t> shape = data.sizes().vec();
  shape[axis] = segments + 1;
  const at::Scalar start = initial.has_value() ? *initial : at::Scalar(1.0);
  const at::Tensor clean = at::where(special, at::ones({}, data.options()), data);
  const at::Tensor clean_prod = at::full(shape, start, data.options()).scatter_reduce(axis, seg, clean, "prod", true).gather(axis, seg);
  // the product of the others' zeros and NaNs: NaN if another is NaN, else 0 if another is 0
  const at::Tensor other_nans = segment_sum_at(nan.to(at::kLong), seg, axis, segments) - nan.to(at::kLong);
  const at::Tensor other_zeros = segment_sum_at(zero.to(at::kLong), seg, axis, segments) - zero.to(at::kLong);
  const at::Tensor others = at::where(other_nans > 0, at::full({}, std::nan(""), data.options()),
                                      at::where(other_zeros > 0, at::zeros({}, data.options()), at::ones({}, data.options())));
  return at::where(special, g * clean_prod * others, g * result / data);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("segment_reduce", k_segment_reduce);
  m.impl("_segment_reduce_backward", k_segment_reduce_backward);
}

}  // namespace
}  // namespace tpu::aten
