// tpu kernels for the fbgemm_gpu sparse/jagged ops that TorchRec's KeyedJaggedTensor,
// KeyedTensor and EmbeddingBagCollection call (fbgemm ships only CPU and CUDA kernels, so
// without these they would take the CPU fallback). Each is composed from tpu aten ops: segment
// ids come from searchsorted over cumulative lengths, data moves with index_select /
// scatter_add, and nothing is copied to the host except an output length the schema does not
// give (one scalar read, as fbgemm's CUDA kernels do).
//
// The kernels are boxed, so they can be registered before fbgemm_gpu defines the ops (it loads
// after torch_tpu): an unboxed kernel's inferred schema would be checked against fbgemm's
// definition while fbgemm loads, and a mismatch there would abort the process. Instead each
// call checks the argument count it was written for (fbgemm_gpu 1.8) and raises otherwise.
#include <torch/library.h>

#include <optional>
#include <vector>

namespace tpu::aten {
namespace {

using Stack = torch::jit::Stack;

// The arguments of a boxed call, taken off the stack after checking the op's schema has the
// shape this file expects.
std::vector<c10::IValue> take_args(const c10::OperatorHandle& op, Stack* stack, size_t num_args, size_t num_returns) {
  const c10::FunctionSchema& schema = op.schema();
  TORCH_CHECK(schema.arguments().size() == num_args && schema.returns().size() == num_returns,
              "torch_tpu: the tpu kernel for ", schema.name(), " was written for fbgemm_gpu 1.8, whose schema differs from '",
              schema, "'. Install fbgemm-gpu-cpu==1.8.0 (the version TorchRec 1.8 needs).");
  std::vector<c10::IValue> args(std::make_move_iterator(stack->end() - num_args), std::make_move_iterator(stack->end()));
  torch::jit::drop(*stack, num_args);
  return args;
}

int64_t to_int(const c10::IValue& v) { return v.isSymInt() ? v.toSymInt().guard_int(__FILE__, __LINE__) : v.toInt(); }

std::optional<int64_t> to_optional_int(const c10::IValue& v) {
  if (v.isNone()) return std::nullopt;
  return to_int(v);
}

std::optional<at::Tensor> to_optional_tensor(const c10::IValue& v) {
  if (v.isNone()) return std::nullopt;
  return v.toTensor();
}

std::vector<int64_t> to_int_vector(const c10::IValue& v) {
  if (v.isIntList()) return v.toIntVector();
  std::vector<int64_t> out;
  for (const c10::IValue& item : v.toListRef()) out.push_back(to_int(item));
  return out;
}

at::TensorOptions long_options(const at::Tensor& like) { return like.options().dtype(at::kLong); }

// Prefix sums along the last dim with a leading zero, in the input's dtype.
at::Tensor complete_cumsum(const at::Tensor& t) {
  std::vector<int64_t> zero_shape = t.sizes().vec();
  zero_shape.back() = 1;
  return at::cat({at::zeros(zero_shape, t.options()), at::cumsum(t, -1, t.scalar_type())}, -1);
}

void check_cumsum_input(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 1 || t.dim() == 2, "fbgemm::", name, ": expected a 1-D or 2-D tensor, got ", t.dim(), " dims");
  TORCH_CHECK(!at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type()) && t.scalar_type() != at::kBool,
              "fbgemm::", name, ": expected an integer tensor, got ", t.scalar_type());
}

void k_complete_cumsum(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 1, 1);
  const at::Tensor t = args[0].toTensor();
  check_cumsum_input(t, "asynchronous_complete_cumsum");
  torch::jit::push(stack, complete_cumsum(t));
}

void k_inclusive_cumsum(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 1, 1);
  const at::Tensor t = args[0].toTensor();
  check_cumsum_input(t, "asynchronous_inclusive_cumsum");
  torch::jit::push(stack, at::cumsum(t, -1, t.scalar_type()));
}

void k_exclusive_cumsum(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 1, 1);
  const at::Tensor t = args[0].toTensor();
  check_cumsum_input(t, "asynchronous_exclusive_cumsum");
  torch::jit::push(stack, at::cumsum(t, -1, t.scalar_type()) - t);
}

// Host read of a device scalar sum, for output lengths the caller did not pass.
int64_t host_sum(const at::Tensor& lengths) { return lengths.numel() == 0 ? 0 : lengths.sum().item<int64_t>(); }

// Concatenates the segments [start[i], start[i] + length[i]) of `data` along dim 0, in order.
// `total` is sum(length).
at::Tensor gather_segments(const at::Tensor& data, const at::Tensor& start, const at::Tensor& length, int64_t total) {
  if (total == 0) return data.narrow(0, 0, 0).clone();
  const at::Tensor out_end = at::cumsum(length, 0);
  const at::Tensor out_start = out_end - length;
  const at::Tensor pos = at::arange(total, long_options(length));
  const at::Tensor seg = at::searchsorted(out_end, pos, /*out_int32=*/false, /*right=*/true).clamp_max(length.numel() - 1);
  const at::Tensor src = start.index_select(0, seg) + pos - out_start.index_select(0, seg);
  return data.index_select(0, src);
}

// Reorders the rows of a [T, B] lengths table (row i of the result is row permute[i]) and the
// jagged values/weights laid out row-major behind it. Returns the permuted [P, B] lengths.
std::tuple<at::Tensor, at::Tensor, std::optional<at::Tensor>> permute_rows(
    const char* name, const at::Tensor& permute, const at::Tensor& lengths, const at::Tensor& values,
    const std::optional<at::Tensor>& weights, std::optional<int64_t> permuted_lengths_sum) {
  TORCH_CHECK(permute.dim() == 1, "fbgemm::", name, ": permute must be 1-D, got ", permute.dim(), " dims");
  TORCH_CHECK(!at::isFloatingType(permute.scalar_type()) && !at::isFloatingType(lengths.scalar_type()),
              "fbgemm::", name, ": permute and lengths must be integer tensors");
  TORCH_CHECK(values.dim() >= 1, "fbgemm::", name, ": values must have at least one dim");
  TORCH_CHECK(!weights.has_value() || weights->size(0) == values.size(0), "fbgemm::", name,
              ": weights must have as many rows as values (", values.size(0), "), got ", weights->size(0));
  const int64_t rows = lengths.size(0), cols = lengths.size(1);
  const at::Tensor perm = permute.to(at::kLong);
  if (perm.numel() > 0) {
    TORCH_CHECK(((perm >= 0) & (perm < rows)).all().item<bool>(), "fbgemm::", name,
                ": permute holds an index outside [0, ", rows, ")");
  }
  const at::Tensor flat_lengths = lengths.reshape({-1}).to(at::kLong);
  const at::Tensor in_start = complete_cumsum(flat_lengths).narrow(0, 0, rows * cols).view({rows, cols});
  const at::Tensor out_lengths = lengths.index_select(0, perm);
  const at::Tensor seg_start = in_start.index_select(0, perm).reshape({-1});
  const at::Tensor seg_length = out_lengths.reshape({-1}).to(at::kLong);
  const int64_t total = permuted_lengths_sum.has_value() ? *permuted_lengths_sum : host_sum(seg_length);
  at::Tensor out_values = gather_segments(values, seg_start, seg_length, total);
  std::optional<at::Tensor> out_weights;
  if (weights.has_value()) out_weights = gather_segments(*weights, seg_start, seg_length, total);
  return {out_lengths, out_values, out_weights};
}

void push_permuted(Stack* stack, at::Tensor lengths, at::Tensor values, std::optional<at::Tensor> weights) {
  stack->emplace_back(std::move(lengths));
  stack->emplace_back(std::move(values));
  stack->emplace_back(weights.has_value() ? c10::IValue(std::move(*weights)) : c10::IValue());
}

// permute_2D_sparse_data(permute, lengths[T, B], values, weights?, permuted_lengths_sum?)
void k_permute_2d(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 5, 3);
  const at::Tensor lengths = args[1].toTensor();
  TORCH_CHECK(lengths.dim() == 2, "fbgemm::permute_2D_sparse_data: lengths must be 2-D, got ", lengths.dim(), " dims");
  auto [l, v, w] = permute_rows("permute_2D_sparse_data", args[0].toTensor(), lengths, args[2].toTensor(),
                                to_optional_tensor(args[3]), to_optional_int(args[4]));
  push_permuted(stack, l, v, w);
}

// permute_1D_sparse_data(permute, lengths[T], values, weights?, permuted_lengths_sum?)
void k_permute_1d(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 5, 3);
  const at::Tensor lengths = args[1].toTensor();
  TORCH_CHECK(lengths.dim() == 1, "fbgemm::permute_1D_sparse_data: lengths must be 1-D, got ", lengths.dim(), " dims");
  auto [l, v, w] = permute_rows("permute_1D_sparse_data", args[0].toTensor(), lengths.view({-1, 1}), args[2].toTensor(),
                                to_optional_tensor(args[3]), to_optional_int(args[4]));
  push_permuted(stack, l.view({-1}), v, w);
}

// permute_2D_sparse_data_input1D(permute, lengths[T * stride], values, stride, weights?, sum?)
void k_permute_2d_input1d(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 6, 3);
  const at::Tensor lengths = args[1].toTensor();
  const int64_t stride = to_int(args[3]);
  TORCH_CHECK(lengths.dim() == 1 && stride > 0 && lengths.numel() % stride == 0,
              "fbgemm::permute_2D_sparse_data_input1D: lengths must be 1-D with a multiple of stride (", stride,
              ") elements, got shape ", lengths.sizes());
  auto [l, v, w] = permute_rows("permute_2D_sparse_data_input1D", args[0].toTensor(), lengths.view({-1, stride}),
                                args[2].toTensor(), to_optional_tensor(args[4]), to_optional_int(args[5]));
  push_permuted(stack, l.reshape({-1}), v, w);
}

// segment_sum_csr(batch_size, csr_seg, values): out[i] = sum(values[csr_seg[i] * batch_size :
// csr_seg[i + 1] * batch_size]).
void k_segment_sum_csr(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 3, 1);
  const int64_t batch_size = to_int(args[0]);
  const at::Tensor csr = args[1].toTensor(), values = args[2].toTensor();
  TORCH_CHECK(csr.dim() == 1 && csr.numel() >= 1, "fbgemm::segment_sum_csr: csr_seg must be 1-D and non-empty");
  TORCH_CHECK(values.dim() == 1, "fbgemm::segment_sum_csr: values must be 1-D, got ", values.dim(), " dims");
  const int64_t segments = csr.numel() - 1;
  if (segments == 0 || values.numel() == 0) {
    torch::jit::push(stack, at::zeros({segments}, values.options()));
    return;
  }
  const at::Tensor bounds = csr.to(at::kLong) * batch_size;
  const at::Tensor starts = bounds.narrow(0, 0, segments), ends = bounds.narrow(0, 1, segments);
  const at::Tensor pos = at::arange(values.numel(), long_options(csr));
  at::Tensor seg = at::searchsorted(ends, pos, false, /*right=*/true);
  // positions outside every segment go to a spare bucket that is dropped
  const at::Tensor inside = (seg < segments) & (pos >= starts.index_select(0, seg.clamp_max(segments - 1)));
  seg = at::where(inside, seg, at::full({}, segments, seg.options()));
  const at::Tensor sums = at::zeros({segments + 1}, values.options()).scatter_add(0, seg, values);
  torch::jit::push(stack, sums.narrow(0, 0, segments));
}

// offsets_range(offsets[N], range_size): out[p] = p - offsets[i] for offsets[i] <= p < the next
// offset (range_size after the last).
void k_offsets_range(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 2, 1);
  const at::Tensor offsets = args[0].toTensor();
  const int64_t range_size = to_int(args[1]);
  TORCH_CHECK(offsets.dim() == 1, "fbgemm::offsets_range: offsets must be 1-D, got ", offsets.dim(), " dims");
  TORCH_CHECK(range_size >= 0, "fbgemm::offsets_range: range_size must be >= 0, got ", range_size);
  if (offsets.numel() == 0 || range_size == 0) {
    torch::jit::push(stack, at::zeros({range_size}, offsets.options()));
    return;
  }
  const at::Tensor off = offsets.to(at::kLong);
  const at::Tensor pos = at::arange(range_size, long_options(off));
  const at::Tensor seg = at::searchsorted(off, pos, false, /*right=*/true) - 1;
  const at::Tensor start = off.index_select(0, seg.clamp_min(0));
  const at::Tensor out = at::where(seg >= 0, pos - start, at::zeros({}, pos.options()));
  torch::jit::push(stack, out.to(offsets.scalar_type()));
}

// One jagged dim: values[N, inner...] with offsets[B + 1] padded to [B, L, inner...].
struct JaggedIndex {
  at::Tensor row;    // [B, L] row of values behind each padded slot
  at::Tensor valid;  // [B, L] whether the slot holds a value
};

JaggedIndex jagged_index(const char* name, const std::vector<at::Tensor>& offsets_list, int64_t max_length) {
  TORCH_CHECK(offsets_list.size() == 1, "fbgemm::", name, " on tpu supports one jagged dimension, got ",
              offsets_list.size(), " offsets tensors");
  const at::Tensor off = offsets_list[0].to(at::kLong);
  TORCH_CHECK(off.dim() == 1 && off.numel() >= 1, "fbgemm::", name, ": offsets must be 1-D and non-empty");
  TORCH_CHECK(max_length >= 0, "fbgemm::", name, ": max_lengths must be >= 0, got ", max_length);
  const int64_t batch = off.numel() - 1;
  const at::Tensor start = off.narrow(0, 0, batch).unsqueeze(1);
  const at::Tensor length = (off.narrow(0, 1, batch) - off.narrow(0, 0, batch)).unsqueeze(1);
  const at::Tensor slot = at::arange(max_length, long_options(off));
  return {start + slot, slot < length};
}

at::Tensor unsqueeze_to(at::Tensor mask, int64_t dims) {
  while (mask.dim() < dims) mask = mask.unsqueeze(-1);
  return mask;
}

// jagged_to_padded_dense_forward(values, offsets[], max_lengths[], padding_value)
void k_jagged_to_padded_dense(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 4, 1);
  const at::Tensor values = args[0].toTensor();
  const std::vector<int64_t> max_lengths = to_int_vector(args[2]);
  TORCH_CHECK(max_lengths.size() == 1, "fbgemm::jagged_to_padded_dense_forward on tpu supports one jagged dimension");
  TORCH_CHECK(values.dim() >= 1, "fbgemm::jagged_to_padded_dense_forward: values must have at least one dim");
  const JaggedIndex index = jagged_index("jagged_to_padded_dense_forward", args[1].toTensorVector(), max_lengths[0]);
  std::vector<int64_t> shape = index.row.sizes().vec();
  shape.insert(shape.end(), values.sizes().begin() + 1, values.sizes().end());
  const at::Tensor pad = at::full({}, args[3].toDouble(), values.options());
  if (values.size(0) == 0 || index.row.numel() == 0) {
    torch::jit::push(stack, pad.expand(shape).contiguous());
    return;
  }
  const at::Tensor rows = index.row.clamp(0, values.size(0) - 1).reshape({-1});
  const at::Tensor gathered = values.index_select(0, rows).view(shape);
  torch::jit::push(stack, at::where(unsqueeze_to(index.valid, gathered.dim()), gathered, pad));
}

// jagged_to_padded_dense_backward(grad_output[B, L, inner...], offsets[], total_L): the gradient
// of the jagged values, zero where no padded slot reads them.
void k_jagged_to_padded_dense_backward(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 3, 1);
  const at::Tensor grad = args[0].toTensor();
  const int64_t total = to_int(args[2]);
  TORCH_CHECK(grad.dim() >= 2, "fbgemm::jagged_to_padded_dense_backward: grad_output must have at least 2 dims");
  const JaggedIndex index = jagged_index("jagged_to_padded_dense_backward", args[1].toTensorVector(), grad.size(1));
  std::vector<int64_t> shape = {total + 1};  // a spare row takes the padding slots' gradient
  shape.insert(shape.end(), grad.sizes().begin() + 2, grad.sizes().end());
  const at::Tensor target = at::where(index.valid, index.row, at::full({}, total, index.row.options())).reshape({-1});
  std::vector<int64_t> flat = {target.numel()};
  flat.insert(flat.end(), grad.sizes().begin() + 2, grad.sizes().end());
  const at::Tensor out = at::zeros(shape, grad.options()).index_add(0, target, grad.reshape(flat));
  torch::jit::push(stack, out.narrow(0, 0, total));
}

// dense_to_jagged_forward(dense[B, L, inner...], offsets[], total_L?): the jagged values whose
// padded form is `dense` (zero past L).
void k_dense_to_jagged(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 3, 1);
  const at::Tensor dense = args[0].toTensor();
  const std::vector<at::Tensor> offsets_list = args[1].toTensorVector();
  TORCH_CHECK(offsets_list.size() == 1, "fbgemm::dense_to_jagged_forward on tpu supports one jagged dimension, got ",
              offsets_list.size(), " offsets tensors");
  TORCH_CHECK(dense.dim() >= 2, "fbgemm::dense_to_jagged_forward: dense must have at least 2 dims");
  const at::Tensor off = offsets_list[0].to(at::kLong);
  const int64_t batch = off.numel() - 1, max_length = dense.size(1);
  TORCH_CHECK(off.dim() == 1 && batch == dense.size(0), "fbgemm::dense_to_jagged_forward: offsets must be 1-D with ",
              dense.size(0) + 1, " entries");
  const std::optional<int64_t> total_arg = to_optional_int(args[2]);
  const int64_t total = total_arg.has_value() ? *total_arg : off.select(0, -1).item<int64_t>();
  std::vector<int64_t> shape = {total};
  shape.insert(shape.end(), dense.sizes().begin() + 2, dense.sizes().end());
  if (total == 0 || dense.numel() == 0) {
    torch::jit::push(stack, at::zeros(shape, dense.options()));
    return;
  }
  const at::Tensor pos = at::arange(total, long_options(off));
  const at::Tensor row = at::searchsorted(off.narrow(0, 1, batch), pos, false, /*right=*/true).clamp_max(batch - 1);
  const at::Tensor slot = pos - off.index_select(0, row);
  const at::Tensor valid = (slot >= 0) & (slot < max_length);
  const at::Tensor flat_index = at::where(valid, row * max_length + slot, at::zeros({}, pos.options()));
  std::vector<int64_t> flat = {batch * max_length};
  flat.insert(flat.end(), dense.sizes().begin() + 2, dense.sizes().end());
  const at::Tensor gathered = dense.reshape(flat).index_select(0, flat_index);
  torch::jit::push(stack, at::where(unsqueeze_to(valid, gathered.dim()), gathered, at::zeros({}, dense.options())));
}

// permute_pooled_embs(pooled[B, D], offset_dim_list[T + 1], permute_list[T], inv_offset_dim_list,
// inv_permute_list): column block i of the result is input block permute_list[i].
void k_permute_pooled_embs(const c10::OperatorHandle& op, Stack* stack) {
  auto args = take_args(op, stack, 5, 1);
  const at::Tensor pooled = args[0].toTensor();
  const at::Tensor offsets = args[1].toTensor().to(at::kLong), perm = args[2].toTensor().to(at::kLong);
  TORCH_CHECK(pooled.dim() == 2, "fbgemm::permute_pooled_embs: pooled_embs must be 2-D, got ", pooled.dim(), " dims");
  TORCH_CHECK(offsets.dim() == 1 && perm.dim() == 1 && offsets.numel() == perm.numel() + 1,
              "fbgemm::permute_pooled_embs: offset_dim_list must have one more entry than permute_list");
  const int64_t blocks = perm.numel(), width = pooled.size(1);
  if (blocks == 0 || width == 0) {
    torch::jit::push(stack, pooled.clone());
    return;
  }
  const at::Tensor dims = offsets.narrow(0, 1, blocks) - offsets.narrow(0, 0, blocks);
  const at::Tensor out_dims = dims.index_select(0, perm);
  const at::Tensor out_end = at::cumsum(out_dims, 0);
  const at::Tensor col = at::arange(width, long_options(offsets));
  const at::Tensor block = at::searchsorted(out_end, col, false, /*right=*/true).clamp_max(blocks - 1);
  const at::Tensor src = offsets.index_select(0, perm.index_select(0, block)) + col -
                         (out_end - out_dims).index_select(0, block);
  torch::jit::push(stack, pooled.index_select(1, src));
}

TORCH_LIBRARY_IMPL(fbgemm, PrivateUse1, m) {
  m.impl("asynchronous_complete_cumsum", torch::CppFunction::makeFromBoxedFunction<&k_complete_cumsum>());
  m.impl("asynchronous_inclusive_cumsum", torch::CppFunction::makeFromBoxedFunction<&k_inclusive_cumsum>());
  m.impl("asynchronous_exclusive_cumsum", torch::CppFunction::makeFromBoxedFunction<&k_exclusive_cumsum>());
  m.impl("permute_2D_sparse_data", torch::CppFunction::makeFromBoxedFunction<&k_permute_2d>());
  m.impl("permute_1D_sparse_data", torch::CppFunction::makeFromBoxedFunction<&k_permute_1d>());
  m.impl("permute_2D_sparse_data_input1D", torch::CppFunction::makeFromBoxedFunction<&k_permute_2d_input1d>());
  m.impl("segment_sum_csr", torch::CppFunction::makeFromBoxedFunction<&k_segment_sum_csr>());
  m.impl("offsets_range", torch::CppFunction::makeFromBoxedFunction<&k_offsets_range>());
  m.impl("jagged_to_padded_dense_forward", torch::CppFunction::makeFromBoxedFunction<&k_jagged_to_padded_dense>());
  m.impl("jagged_to_padded_dense_backward",
         torch::CppFunction::makeFromBoxedFunction<&k_jagged_to_padded_dense_backward>());
  m.impl("dense_to_jagged_forward", torch::CppFunction::makeFromBoxedFunction<&k_dense_to_jagged>());
  m.impl("permute_pooled_embs", torch::CppFunction::makeFromBoxedFunction<&k_permute_pooled_embs>());
  m.impl("permute_pooled_embs_auto_grad", torch::CppFunction::makeFromBoxedFunction<&k_permute_pooled_embs>());
}

}  // namespace
}  // namespace tpu::aten
