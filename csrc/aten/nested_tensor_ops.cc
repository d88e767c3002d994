// Nested tensors on tpu, as far as nn.TransformerEncoder's fast path needs them: with a
// src_key_padding_mask in eval mode it packs the batch into a nested tensor
// (_nested_tensor_from_mask), runs each layer on it (_transformer_encoder_layer_fwd) and pads the
// result back (to_padded_tensor). A tpu nested tensor is PyTorch's NestedTensorImpl over a tpu
// buffer (sizes on the host, as for CUDA). The layer (and MultiheadAttention's fast path) pads
// its input to a dense batch, runs the dense tpu kernel with the equivalent key padding mask and
// packs the valid rows again: equal to the CPU's nested kernels on every valid row.
// Building the nested tensor reads the sequence lengths on the host, so this path does not run
// under torch.compile (PyTorch itself skips it there while mask_check is on).
#include <ATen/ATen.h>
#include <ATen/NestedTensorImpl.h>
#include <ATen/native/nested/NestedTensorUtils.h>
#include <torch/library.h>

namespace tpu::aten {
namespace {

using at::native::get_nested_tensor_impl;

void check_padding_mask(const at::Tensor& t, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Expected mask to be of type Bool, but got ", mask.scalar_type(),
              " instead.");
  TORCH_CHECK(mask.dim() == 2, "Padding mask should be 2D");
  TORCH_CHECK(t.dim() == 3, "Input should be a 3D tensor, N * L * D");
  TORCH_CHECK(t.size(0) == mask.size(0) && t.size(1) == mask.size(1), "Mask size should match input size");
}

// The components' sizes (host [n, rank] int64) of a nested tensor.
std::vector<std::vector<int64_t>> component_sizes(const at::Tensor& nested) {
  const at::Tensor sizes = get_nested_tensor_impl(nested)->get_nested_sizes().contiguous();
  TORCH_CHECK(sizes.device().is_cpu() && sizes.scalar_type() == at::kLong, "unexpected nested sizes tensor");
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(sizes.size(0)));
  const int64_t rank = sizes.dim() == 2 ? sizes.size(1) : 0;
  const int64_t* p = sizes.data_ptr<int64_t>();
  for (size_t i = 0; i < out.size(); ++i) out[i].assign(p + i * rank, p + (i + 1) * rank);
  return out;
}

// A dense [n, max sizes...] (or output_size) tensor of the components, `padding` elsewhere.
at::Tensor pad_nested(const at::Tensor& nested, double padding, at::IntArrayRef output_size = {}) {
  const auto sizes = component_sizes(nested);
  const at::Tensor buffer = get_nested_tensor_impl(nested)->get_buffer();
  TORCH_CHECK(!sizes.empty(), "to_padded_tensor: the nested tensor has no components");
  std::vector<int64_t> max_sizes = sizes[0];
  for (const auto& s : sizes) {
    TORCH_CHECK(s.size() == max_sizes.size(), "to_padded_tensor: components of different ranks");
    for (size_t d = 0; d < s.size(); ++d) max_sizes[d] = std::max(max_sizes[d], s[d]);
  }
  if (!output_size.empty()) {
    TORCH_CHECK(output_size.size() == max_sizes.size() + 1, "Length of output_size does not match NestedTensor dims.");
    TORCH_CHECK(output_size[0] >= static_cast<int64_t>(sizes.size()), "output_size smaller than the nested tensor");
    for (size_t d = 0; d < max_sizes.size(); ++d) {
      TORCH_CHECK(output_size[d + 1] >= max_sizes[d], "Value in output_size is less than NestedTensor padded size.");
      max_sizes[d] = output_size[d + 1];
    }
  }
  std::vector<at::Tensor> rows;
  int64_t offset = 0;
  for (const auto& s : sizes) {
    const int64_t numel = c10::multiply_integers(s);
    std::vector<int64_t> pad;  // constant_pad_nd: (before, after) pairs from the last dim
    for (size_t d = s.size(); d-- > 0;) {
      pad.push_back(0);
      pad.push_back(max_sizes[d] - s[d]);
    }
    rows.push_back(at::constant_pad_nd(buffer.narrow(0, offset, numel).view(s), pad, padding));
    offset += numel;
  }
  at::Tensor dense = at::stack(rows);
  if (!output_size.empty() && output_size[0] > dense.size(0)) {
    std::vector<int64_t> pad(2 * max_sizes.size(), 0);
    pad.push_back(0);
    pad.push_back(output_size[0] - dense.size(0));
    dense = at::constant_pad_nd(dense, pad, padding);
  }
  return dense;
}

// A nested tensor of dense[i] narrowed to component i's sizes; `sizes` is the host size matrix.
at::Tensor pack_nested(const at::Tensor& dense, const at::Tensor& sizes) {
  const at::Tensor sz = sizes.contiguous();
  const int64_t n = sz.size(0), rank = sz.size(1);
  const int64_t* p = sz.data_ptr<int64_t>();
  std::vector<at::Tensor> parts;
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor part = dense.select(0, i);
    for (int64_t d = 0; d < rank; ++d) part = part.narrow(d, 0, p[i * rank + d]);
    parts.push_back(part.reshape({-1}));
  }
  at::Tensor buffer = parts.empty() ? at::empty({0}, dense.options()) : at::cat(parts).contiguous();
  return at::native::wrap_buffer(buffer, sz.clone());
}

// (dense [B, T, E] zero-padded, key padding mask [B, T] bool: True = padding) of a nested
// [B, *, E] tensor.
std::pair<at::Tensor, at::Tensor> dense_with_padding_mask(const at::Tensor& nested) {
  TORCH_CHECK(nested.dim() == 3, "expected a 3-D nested tensor (batch, *, embed_dim), got ", nested.dim(), "-D");
  at::Tensor dense = pad_nested(nested, 0.0);
  const at::Tensor lengths = get_nested_tensor_impl(nested)->get_nested_sizes().select(1, 0).to(dense.device());
  at::Tensor positions = at::arange(dense.size(1), dense.options().dtype(at::kLong));
  return {dense, positions.unsqueeze(0) >= lengths.unsqueeze(1)};
}

bool k_nested_tensor_from_mask_left_aligned(const at::Tensor& t, const at::Tensor& mask) {
  check_padding_mask(t, mask);
  at::Tensor lengths = mask.sum(1);
  at::Tensor left_aligned = at::arange(mask.size(1), lengths.options()).unsqueeze(0) < lengths.unsqueeze(1);
  return at::equal(left_aligned, mask);
}

at::Tensor k_nested_tensor_from_mask(const at::Tensor& t, const at::Tensor& mask, bool mask_check) {
  check_padding_mask(t, mask);
  if (mask_check) {
    TORCH_CHECK(k_nested_tensor_from_mask_left_aligned(t, mask), "Mask must be left aligned without gaps");
  }
  at::Tensor lengths = mask.sum(1).cpu();
  at::Tensor sizes = at::stack({lengths, at::full_like(lengths, t.size(2))}, 1);
  return pack_nested(t, sizes);
}

at::Tensor k_nested_to_padded_tensor(const at::Tensor& self, double padding, at::OptionalSymIntArrayRef output_size) {
  if (!output_size.has_value()) return pad_nested(self, padding);
  return pad_nested(self, padding, C10_AS_INTARRAYREF_SLOW(*output_size));
}

at::Tensor k_nested_transformer_encoder_layer_fwd(
    const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias, bool use_gelu,
    bool norm_first, double eps, const at::Tensor& norm_weight_1, const at::Tensor& norm_bias_1,
    const at::Tensor& norm_weight_2, const at::Tensor& norm_bias_2, const at::Tensor& ffn_weight_1,
    const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2, const at::Tensor& ffn_bias_2,
    const std::optional<at::Tensor>& mask, std::optional<int64_t> mask_type) {
  TORCH_CHECK(!mask.has_value() || !mask->defined(), "NestedTensor with mask is not supported yet");
  const at::Tensor buffer = get_nested_tensor_impl(src)->get_buffer();
  const at::Tensor& sizes = get_nested_tensor_impl(src)->get_nested_sizes();
  if (buffer.numel() == 0) return at::native::wrap_buffer(buffer.clone(), sizes.clone());
  auto [dense, padding] = dense_with_padding_mask(src);
  at::Tensor out = at::_transformer_encoder_layer_fwd(
      dense, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
      norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
      padding, /*mask_type=*/1);
  return pack_nested(out, sizes);
}

std::tuple<at::Tensor, at::Tensor> k_nested_native_multi_head_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim, int64_t num_head,
    const at::Tensor& qkv_weight, const at::Tensor& qkv_bias, const at::Tensor& proj_weight,
    const at::Tensor& proj_bias, const std::optional<at::Tensor>& mask, bool need_weights, bool average_attn_weights,
    std::optional<int64_t> mask_type) {
  TORCH_CHECK(!mask.has_value() || !mask->defined(), "NestedTensor with mask is not supported yet");
  TORCH_CHECK(query.is_nested() && query.is_same(key) && key.is_same(value),
              "_native_multi_head_attention on tpu nested tensors: only self-attention (query is key is value)");
  auto [dense, padding] = dense_with_padding_mask(query);
  auto outputs = at::_native_multi_head_attention(dense, dense, dense, embed_dim, num_head, qkv_weight, qkv_bias,
                                                  proj_weight, proj_bias, padding, need_weights, average_attn_weights,
                                                  /*mask_type=*/1);
  at::Tensor weights = std::get<1>(outputs);
  if (weights.defined()) {  // the CPU kernel gives padded query rows zero weights
    std::vector<int64_t> rows(static_cast<size_t>(weights.dim()), 1);
    rows[0] = padding.size(0);
    rows[weights.dim() - 2] = padding.size(1);
    weights = weights.masked_fill(padding.view(rows), 0);
  }
  return {pack_nested(std::get<0>(outputs), get_nested_tensor_impl(query)->get_nested_sizes()), weights};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_nested_tensor_from_mask", k_nested_tensor_from_mask);
  m.impl("_nested_tensor_from_mask_left_aligned", k_nested_tensor_from_mask_left_aligned);
}

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("to_padded_tensor", k_nested_to_padded_tensor);
  m.impl("_transformer_encoder_layer_fwd", k_nested_transformer_encoder_layer_fwd);
  m.impl("_native_multi_head_attention", k_nested_native_multi_head_attention);
}

}  // namespace
}  // namespace tpu::aten
