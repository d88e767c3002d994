// scaled_dot_product_attention on the device as one program (lowering/attention.cc).
//
// F.scaled_dot_product_attention is a composite that asks the `_fused_sdp_choice_stub`
// DispatchStub which backend to use. Registering the stub for PrivateUse1 and answering
// "overrideable" makes it call _scaled_dot_product_fused_attention_overrideable, whose
// autograd formula calls the _backward op: both are implemented here, so eager autograd,
// Fused Eager and torch.compile (whose graphs keep the overrideable ops) all run the same two
// lowerings. Calls the program does not cover (nested tensors, other ranks, key/value batch
// broadcasting, disabled backend) get the math choice, PyTorch's own decomposition.
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "aten/op_runner.h"
#include "aten/tensor_access.h"
#include "device/generator.h"
#include "lowering/attention.h"

namespace tpu::aten {
namespace {

namespace attn = lowering::attention;

bool is_attention_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

// Whether `mask` broadcasts to the attention matrix [.., Hq, L, S] of `query`, `key`.
bool mask_fits(const at::Tensor& mask, const at::Tensor& query, const at::Tensor& key) {
  if (mask.dim() > query.dim()) return false;
  std::vector<c10::SymInt> target(query.sym_sizes().begin(), query.sym_sizes().end() - 1);
  target.push_back(key.sym_size(-2));
  const int64_t lead = query.dim() - mask.dim();
  for (int64_t i = 0; i < mask.dim(); ++i) {
    const c10::SymInt& m = mask.sym_size(i);
    if (!(m == 1) && !(m == target[lead + i])) return false;
  }
  return true;
}

// True when the one-program lowering computes exactly what the math path would.
bool program_covers(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal, bool enable_gqa) {
  if (q.is_nested() || k.is_nested() || v.is_nested()) return false;
  if (!q.is_privateuseone() || k.device() != q.device() || v.device() != q.device()) return false;
  if ((q.dim() != 3 && q.dim() != 4) || k.dim() != q.dim() || v.dim() != q.dim()) return false;
  if (!is_attention_dtype(q.scalar_type()) || k.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type()) {
    return false;
  }
  if (!(dropout_p >= 0.0 && dropout_p < 1.0)) return false;
  const bool has_mask = mask.has_value() && mask->defined();
  if (has_mask) {
    if (is_causal || mask->is_nested() || mask->device() != q.device()) return false;
    if (mask->scalar_type() != at::kBool && !is_attention_dtype(mask->scalar_type())) return false;
    if (!mask_fits(*mask, q, k)) return false;
  }
  if (q.dim() == 4 && !(k.sym_size(0) == q.sym_size(0) && v.sym_size(0) == q.sym_size(0))) return false;
  const c10::SymInt hq = q.sym_size(-3), hk = k.sym_size(-3);
  if (!(v.sym_size(-3) == hk) || hk == 0) return false;
  if (!(hq == hk) && !(enable_gqa && hq % hk == 0)) return false;
  if (!(k.sym_size(-1) == q.sym_size(-1)) || !(v.sym_size(-2) == k.sym_size(-2))) return false;
  // Empty attention: PyTorch's decomposition handles the edge cases.
  for (const at::Tensor* t : {&q, &k, &v}) {
    if (t->sym_numel() == 0) return false;
  }
  return true;
}

int64_t choose_sdp_backend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                           std::optional<double> /*scale*/, bool enable_gqa) {
  auto& ctx = at::globalContext();
  if (ctx.userEnabledOverrideableSDP() && program_covers(q, k, v, mask, dropout_p, is_causal, enable_gqa)) {
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  }
  // The composite raises PyTorch's "no viable backend" error for SDPBackend::error.
  return static_cast<int64_t>(ctx.userEnabledMathSDP() ? at::SDPBackend::math : at::SDPBackend::error);
}

// The dims of `t` from outermost to innermost in memory (a stable sort by stride), so results
// can be laid out like the input they belong to, as PyTorch's meta kernels promise.
std::vector<int64_t> memory_order(const at::Tensor& t) {
  std::vector<int64_t> order(t.dim());
  std::iota(order.begin(), order.end(), 0);
  const auto strides = t.strides();
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  return order;
}

// `physical` holds the logical tensor permuted to `order`: view it back in logical dim order.
at::Tensor from_order(const at::Tensor& physical, const std::vector<int64_t>& order) {
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
  return physical.permute(inverse);
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor* bias,
                  double dropout_p, bool is_causal, const char* op) {
  TORCH_CHECK(q.is_privateuseone() && k.device() == q.device() && v.device() == q.device(), op,
              ": query, key and value must be on one tpu device, got ", q.device(), ", ", k.device(), ", ",
              v.device());
  TORCH_CHECK((q.dim() == 3 || q.dim() == 4) && k.dim() == q.dim() && v.dim() == q.dim(), op,
              ": query, key and value must all be 3-D (H, L, E) or all 4-D (N, H, L, E), got ", q.sizes(), ", ",
              k.sizes(), ", ", v.sizes());
  TORCH_CHECK(is_attention_dtype(q.scalar_type()) && k.scalar_type() == q.scalar_type() &&
                  v.scalar_type() == q.scalar_type(),
              op, ": query, key and value must have one floating dtype, got ", q.scalar_type(), ", ",
              k.scalar_type(), ", ", v.scalar_type());
  TORCH_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, op, ": dropout_p must be in [0, 1), got ", dropout_p);
  TORCH_CHECK(q.dim() == 3 || (k.size(0) == q.size(0) && v.size(0) == q.size(0)), op,
              ": query, key and value must have the same batch size, got ", q.sizes(), ", ", k.sizes(), ", ",
              v.sizes());
  const int64_t hq = q.size(-3), hk = k.size(-3);
  TORCH_CHECK(hk > 0 && v.size(-3) == hk && hq % hk == 0, op,
              ": the number of query heads must be a multiple of the key/value heads, got ", hq, ", ", hk, ", ",
              v.size(-3));
  TORCH_CHECK(k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2), op,
              ": key must have query's head size and value key's sequence length, got ", q.sizes(), ", ", k.sizes(),
              ", ", v.sizes());
  if (bias != nullptr) {
    TORCH_CHECK(!is_causal, op, ": an explicit attn_mask cannot be combined with is_causal=True");
    TORCH_CHECK(bias->device() == q.device(), op, ": attn_mask must be on ", q.device(), ", got ", bias->device());
    TORCH_CHECK(bias->scalar_type() == at::kBool || is_attention_dtype(bias->scalar_type()), op,
                ": attn_mask must be bool or floating, got ", bias->scalar_type());
    TORCH_CHECK(mask_fits(*bias, q, k), op, ": attn_mask of shape ", bias->sizes(),
                " does not broadcast to the attention matrix of query ", q.sizes(), " and key ", k.sizes());
  }
}

void set_common_attrs(OpRunner& r, const at::Tensor& q, bool has_bias, double dropout_p, bool is_causal,
                      std::optional<double> scale) {
  const double resolved = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  r.attrs()
      .set_float("scale", resolved)
      .set_bool("is_causal", is_causal)
      .set_float("dropout_p", dropout_p)
      .set_bool("has_bias", has_bias);
}

using ForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt,
                                 at::Tensor, at::Tensor, at::Tensor>;

ForwardResult k_sdpa_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                             bool return_debug_mask, std::optional<double> scale) {
  const char* op = "aten::_scaled_dot_product_fused_attention_overrideable";
  const bool has_bias = attn_bias.has_value() && attn_bias->defined();
  check_inputs(q, k, v, has_bias ? &*attn_bias : nullptr, dropout_p, is_causal, op);
  TORCH_CHECK(!return_debug_mask, op, ": return_debug_mask=True is not supported on tpu");
  OpRunner r(attn::kForward, op);
  r.input(q).input(k).input(v);
  if (has_bias) r.input(*attn_bias);
  set_common_attrs(r, q, has_bias, dropout_p, is_causal, scale);
  const std::vector<int64_t> order = memory_order(q);
  r.attrs().set_ints("out_order", order);
  if (dropout_p > 0) {
    // Counter space for one 32-bit draw per attention weight (two per element, like dropout).
    const uint64_t weights = static_cast<uint64_t>(q.numel() / q.size(-1)) * static_cast<uint64_t>(k.size(-2));
    auto* g = device::generator_for(std::nullopt, static_cast<c10::DeviceIndex>(tpu_index(q)));
    auto [seed, offset] = g->reserve(2 * weights);
    r.scalar_u64(seed, /*cacheable=*/true).scalar_u64(offset, /*cacheable=*/false);
  }
  auto outs = r.run(4);
  return {from_order(outs[0], order), outs[1], at::Tensor(), at::Tensor(), c10::SymInt(q.size(-2)),
          c10::SymInt(k.size(-2)), outs[2], outs[3], at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> k_sdpa_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/,
    c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p, bool is_causal, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, std::optional<double> scale) {
  const char* op = "aten::_scaled_dot_product_fused_attention_overrideable_backward";
  const bool has_bias = attn_bias.defined();
  check_inputs(q, k, v, has_bias ? &attn_bias : nullptr, dropout_p, is_causal, op);
  std::vector<int64_t> q_shape(q.sizes().begin(), q.sizes().end());
  q_shape.back() = v.size(-1);
  TORCH_CHECK(grad_out.sizes() == at::IntArrayRef(q_shape), op, ": grad_out must have shape ", q_shape, ", got ",
              grad_out.sizes());
  const int64_t n = q.dim() == 4 ? q.size(0) : 1;
  TORCH_CHECK(logsumexp.dim() == 3 && logsumexp.size(0) == n && logsumexp.size(1) == q.size(-3) &&
                  logsumexp.size(2) == q.size(-2),
              op, ": logsumexp must have shape [", n, ", ", q.size(-3), ", ", q.size(-2), "], got ",
              logsumexp.sizes());
  const bool want_bias = has_bias && grad_input_mask[3] && attn_bias.scalar_type() != at::kBool;
  const std::array<bool, 4> want{grad_input_mask[0], grad_input_mask[1], grad_input_mask[2], want_bias};
  if (!want[0] && !want[1] && !want[2] && !want[3]) return {};
  OpRunner r(attn::kBackward, op);
  r.input(grad_out).input(q).input(k).input(v);
  if (has_bias) r.input(attn_bias);
  r.input(logsumexp);
  // The forward's output gives the softmax backward's row sums without the dP product.
  const bool has_out = out.defined() && out.sizes() == grad_out.sizes();
  if (has_out) r.input(out);
  if (dropout_p > 0) {
    TORCH_CHECK(philox_seed.defined() && philox_offset.defined() && philox_seed.numel() == 1 &&
                    philox_offset.numel() == 1,
                op, ": dropout needs the forward's philox_seed and philox_offset");
    r.input(philox_seed, at::kLong).input(philox_offset, at::kLong);
  }
  set_common_attrs(r, q, has_bias, dropout_p, is_causal, scale);
  const std::array<const at::Tensor*, 3> inputs{&q, &k, &v};
  const std::array<const char*, 3> order_keys{"q_order", "k_order", "v_order"};
  std::array<std::vector<int64_t>, 3> orders;
  for (size_t i = 0; i < 3; ++i) {
    orders[i] = memory_order(*inputs[i]);
    r.attrs().set_ints(order_keys[i], orders[i]);
  }
  r.attrs().set_bool("want_q", want[0]).set_bool("want_k", want[1]).set_bool("want_v", want[2]);
  r.attrs().set_bool("want_bias", want[3]).set_bool("has_out", has_out);
  const size_t count = std::count(want.begin(), want.end(), true);
  auto outs = r.run(count);
  std::array<at::Tensor, 4> grads;
  size_t next = 0;
  for (size_t i = 0; i < 4; ++i) {
    if (!want[i]) continue;
    grads[i] = i < 3 ? from_order(outs[next], orders[i]) : outs[next];
    ++next;
  }
  return {grads[0], grads[1], grads[2], grads[3]};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", choose_sdp_backend);
  m.impl("_scaled_dot_product_fused_attention_overrideable", k_sdpa_forward);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", k_sdpa_backward);
}

}  // namespace
}  // namespace tpu::aten

// The composite consults the DispatchStub, not the aten::_fused_sdp_choice operator.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &tpu::aten::choose_sdp_backend)
}  // namespace at::native
