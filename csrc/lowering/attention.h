// The contract between the SDPA kernels (aten/attention_ops.cc) and their lowerings
// (lowering/attention.cc): lowering names, input order and attributes. One program per call
// signature does the whole attention (forward) or its whole gradient (backward).
//
// "sdpa_fwd" inputs: q [.., Hq, L, E], k [.., Hk, S, E], v [.., Hk, S, Ev], then bias when
//   attrs.has_bias (any shape broadcastable to [.., Hq, L, S]), then the generator's seed and
//   offset (ui64 runtime scalars) when attrs.dropout_p > 0.
//   Outputs: out (q's dtype; dims in the order attrs.out_order, see below), logsumexp
//   [N, Hq, L] float32 (N = 1 for 3-D inputs), seed and offset as i64 rank-0 tensors (0 without
//   dropout) so the backward regenerates the same dropout mask.
// "sdpa_bwd" inputs: grad_out [.., Hq, L, Ev], q, k, v, bias when attrs.has_bias, logsumexp,
//   the forward's out [.., Hq, L, Ev] when attrs.has_out, seed and offset (i64 rank-0 tensors)
//   when attrs.dropout_p > 0.
//   Outputs, each only when its attrs.want_* is set: grad_q, grad_k, grad_v (dims in
//   attrs.q_order / k_order / v_order), grad_bias (bias's shape).
//
// Attributes: scale (float, already resolved), is_causal, dropout_p (float), has_bias.
// Hq must be a multiple of Hk (grouped-query attention; Hq == Hk is plain attention).
// The *_order attributes list the logical dims from outermost to innermost in memory: the
// program returns the result permuted to that order, and the kernel views it back, so results
// have the memory layout of the matching input (as PyTorch's meta kernels promise).
#pragma once

namespace tpu::lowering::attention {

inline constexpr const char* kForward = "sdpa_fwd";
inline constexpr const char* kBackward = "sdpa_bwd";

}  // namespace tpu::lowering::attention
