// The fast paths of nn.MultiheadAttention and nn.TransformerEncoderLayer in eval mode
// (_native_multi_head_attention, _transformer_encoder_layer_fwd and their helpers
// _transform_bias_rescale_qkv and _masked_softmax), composed of tpu ops so that they run on the
// device and are recorded into fused / compiled graphs like any other op. The semantics follow
// PyTorch's CPU kernels (aten/src/ATen/native/transformers/): a non-bool mask is turned into a
// bool one (nonzero = masked out), and a query whose keys are all masked is NaN.
// Nested-tensor inputs are handled in nested_tensor_ops.cc.
#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

namespace tpu::aten {
namespace {

// The mask of _masked_softmax as a bool tensor of the scores' shape (True = masked out).
// mask_type 0: (L, S) attention mask, 1: (B, S) key padding mask, 2: already the scores' shape;
// without a type the mask is broadcast.
at::Tensor expand_softmax_mask(at::IntArrayRef scores, const at::Tensor& mask, std::optional<int64_t> mask_type) {
  at::Tensor m = mask.scalar_type() == at::kBool ? mask : mask.to(at::kBool);
  if (mask_type.has_value() && m.dim() == 2 && scores.size() == 4) {
    const int64_t type = *mask_type;
    TORCH_CHECK(type == 0 || type == 1 || type == 2,
                "Mask Type should be 0 (src_mask), 1 (src_key_padding_mask), or 2 (default_mask)");
    if (type == 1) {
      TORCH_CHECK(m.size(0) == scores[0] && m.size(1) == scores[3],
                  "For mask_type == 1 mask shape should be (B, L)");
      m = m.view({m.size(0), 1, 1, m.size(1)});
    } else if (type == 0) {
      TORCH_CHECK(m.size(0) == scores[2] && m.size(1) == scores[3],
                  "For mask_type == 0 mask shape should be (L, L)");
    }
  }
  TORCH_CHECK(at::is_expandable_to(m.sizes(), scores), "attention mask of shape ", m.sizes(),
              " does not match the attention scores of shape ", scores);
  return m.expand(scores);
}

// softmax over `dim` with masked positions excluded; like the CPU kernel, a row whose positions
// are all masked is NaN.
at::Tensor masked_softmax(const at::Tensor& scores, const at::Tensor& bool_mask, int64_t dim) {
  return at::softmax(scores.masked_fill(bool_mask, -std::numeric_limits<double>::infinity()), dim);
}

at::Tensor k_masked_softmax(const at::Tensor& self, const at::Tensor& mask, std::optional<int64_t> dim,
                            std::optional<int64_t> mask_type) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be a boolean tensor");
  const int64_t d = at::maybe_wrap_dim(dim.value_or(self.dim() - 1), self.dim());
  return masked_softmax(self, expand_softmax_mask(self.sizes(), mask, mask_type), d);
}

// q = (q + q_bias) / sqrt(dim_per_head), k = k + k_bias, v = v + v_bias, each [B, heads, T, dh].
std::tuple<at::Tensor, at::Tensor, at::Tensor> k_transform_bias_rescale_qkv(const at::Tensor& qkv,
                                                                           const at::Tensor& qkv_bias,
                                                                           int64_t num_heads) {
  TORCH_CHECK(!qkv.is_nested(), "_transform_bias_rescale_qkv: nested qkv is not supported on tpu");
  TORCH_CHECK(qkv.dim() == 3, "_transform_bias_rescale_qkv: expected a 3-D qkv, got ", qkv.dim(), "-D");
  const int64_t B = qkv.size(0), T = qkv.size(1), D3 = qkv.size(2);
  TORCH_CHECK(D3 % 3 == 0, "_transform_bias_rescale_qkv: last dim ", D3, " is not 3 * embed_dim");
  const int64_t D = D3 / 3;
  TORCH_CHECK(num_heads > 0 && D % num_heads == 0, "`embed_dim` must divide evenly by `num_heads`");
  TORCH_CHECK(qkv_bias.dim() == 1 && qkv_bias.size(0) == D3, "_transform_bias_rescale_qkv: expected a bias of ",
              D3, " values, got shape ", qkv_bias.sizes());
  const int64_t dh = D / num_heads;
  at::Tensor heads = (qkv + qkv_bias).view({B, T, 3, num_heads, dh}).permute({2, 0, 3, 1, 4});
  const double inv_sqrt = 1.0 / std::sqrt(static_cast<double>(dh));
  return {(heads.select(0, 0) * inv_sqrt).contiguous(), heads.select(0, 1).contiguous(),
          heads.select(0, 2).contiguous()};
}

// [B, T, 3 * D]: the in-projection without bias (added by _transform_bias_rescale_qkv).
at::Tensor qkv_projection(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t D,
                          const at::Tensor& qkv_weight) {
  if (key.is_same(value) && query.is_same(key)) return at::matmul(query, qkv_weight.t());
  auto w = qkv_weight.split(D, 0);
  if (key.is_same(value)) {
    return at::cat({at::matmul(query, w[0].t()), at::matmul(key, qkv_weight.narrow(0, D, 2 * D).t())}, 2);
  }
  return at::cat({at::matmul(query, w[0].t()), at::matmul(key, w[1].t()), at::matmul(value, w[2].t())}, 2);
}

void check_mha_args(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t D,
                    int64_t num_head, const at::Tensor& qkv_weight, const at::Tensor& qkv_bias) {
  TORCH_CHECK(query.dim() == 3, "expected 3-D `query`, got ", query.dim(), "-D tensor");
  TORCH_CHECK(query.size(2) == D, "passed-in embed_dim ", D, " didn't match last dim of query ", query.size(2));
  TORCH_CHECK(key.dim() == 3, "expected 3-D `key`, got ", key.dim(), "-D tensor");
  TORCH_CHECK(value.dim() == 3, "expected 3-D `value`, got ", value.dim(), "-D tensor");
  TORCH_CHECK(query.sizes() == key.sizes() && key.sizes() == value.sizes(),
              "expected `query`/`key`/`value` shapes to match");
  TORCH_CHECK(qkv_weight.dim() == 2, "expected 2-D `qkv_weight`, got ", qkv_weight.dim(), "-D tensor");
  TORCH_CHECK(D * 3 == qkv_weight.size(0), "expected `qkv_weight` first dim to be 3x embed_dim");
  TORCH_CHECK(D == qkv_weight.size(1), "expected `qkv_weight` second dim to be embed_Dim");
  TORCH_CHECK(qkv_bias.dim() == 1, "expected 1-D `qkv_bias`, got ", qkv_bias.dim(), "-D tensor");
  TORCH_CHECK(qkv_bias.size(0) == 3 * D, "expected `qkv_bias` first dim and first dim of query to be equal");
  TORCH_CHECK(num_head > 0 && D % num_head == 0, "`embed_dim` must divide evenly by `num_heads`");
}

// Attention context [B, heads, T, dh] without the weights: scaled_dot_product_attention (q is
// already scaled), so a fused SDPA lowering serves it. A query whose keys are all masked is NaN,
// as in the CPU kernel (whose masked softmax gives NaN there), whatever SDPA makes of it.
at::Tensor attention_context(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& bool_mask) {
  if (!bool_mask.has_value()) return at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, false, 1.0);
  at::Tensor ctx = at::scaled_dot_product_attention(q, k, v, bool_mask->logical_not(), 0.0, false, 1.0);
  at::Tensor no_key = bool_mask->all(-1, /*keepdim=*/true);
  return at::where(no_key, at::full({}, std::numeric_limits<double>::quiet_NaN(), ctx.options()), ctx);
}

std::tuple<at::Tensor, at::Tensor> k_native_multi_head_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim, int64_t num_head,
    const at::Tensor& qkv_weight, const at::Tensor& qkv_bias, const at::Tensor& proj_weight,
    const at::Tensor& proj_bias, const std::optional<at::Tensor>& mask, bool need_weights, bool average_attn_weights,
    std::optional<int64_t> mask_type) {
  const int64_t D = embed_dim;
  check_mha_args(query, key, value, D, num_head, qkv_weight, qkv_bias);
  at::Tensor qkv = qkv_projection(query, key, value, D, qkv_weight);
  if (qkv.numel() == 0) return {at::empty_like(query), at::Tensor()};
  auto [q, k, v] = k_transform_bias_rescale_qkv(qkv, qkv_bias, num_head);
  const int64_t B = query.size(0), T = query.size(1);
  std::optional<at::Tensor> bool_mask;
  at::Tensor weights, ctx;
  if (mask.has_value() && mask->defined()) {
    bool_mask = expand_softmax_mask({B, num_head, T, T}, *mask, mask_type);
  }
  if (need_weights) {
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1));
    weights = bool_mask.has_value() ? masked_softmax(scores, *bool_mask, -1) : at::softmax(scores, -1);
    ctx = at::matmul(weights, v);
  } else {
    ctx = attention_context(q, k, v, bool_mask);
  }
  at::Tensor proj = at::linear(ctx.permute({0, 2, 1, 3}).reshape({B, T, D}), proj_weight, proj_bias);
  if (need_weights && average_attn_weights) weights = weights.sum(1) / num_head;
  return {proj, weights};
}

at::Tensor k_transformer_encoder_layer_fwd(
    const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias, bool use_gelu,
    bool norm_first, double eps, const at::Tensor& norm_weight_1, const at::Tensor& norm_bias_1,
    const at::Tensor& norm_weight_2, const at::Tensor& norm_bias_2, const at::Tensor& ffn_weight_1,
    const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2, const at::Tensor& ffn_bias_2,
    const std::optional<at::Tensor>& mask, std::optional<int64_t> mask_type) {
  if (src.numel() == 0) return src.clone();
  auto norm = [&](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return at::layer_norm(x, {embed_dim}, w, b, eps);
  };
  at::Tensor x = norm_first ? norm(src, norm_weight_1, norm_bias_1) : src;
  x = std::get<0>(k_native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                                proj_bias, mask, /*need_weights=*/false,
                                                /*average_attn_weights=*/true, mask_type)) +
      src;
  if (!norm_first) x = norm(x, norm_weight_1, norm_bias_1);
  at::Tensor residual = x;
  if (norm_first) x = norm(x, norm_weight_2, norm_bias_2);
  x = at::linear(x, ffn_weight_1, ffn_bias_1);
  x = use_gelu ? at::gelu(x) : at::relu(x);
  x = at::linear(x, ffn_weight_2, ffn_bias_2) + residual;
  if (!norm_first) x = norm(x, norm_weight_2, norm_bias_2);
  return x;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_masked_softmax", k_masked_softmax);
  m.impl("_transform_bias_rescale_qkv", k_transform_bias_rescale_qkv);
  m.impl("_native_multi_head_attention", k_native_multi_head_attention);
  m.impl("_transformer_encoder_layer_fwd", k_transformer_encoder_layer_fwd);
}

}  // namespace
}  // namespace tpu::aten
