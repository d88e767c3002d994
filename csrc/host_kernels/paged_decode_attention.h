// Paged decode attention on the host: one query token per request attends to that request's
// keys and values where they lie in the paged KV cache, without gathering them into a window.
//
//   stablehlo.custom_call @torch_tpu_paged_decode_attention(q, k, v, table, position[, row])
//     {api_version = 4, backend_config = {scale, soft_cap, window, k_offset, v_offset}}
//
//   q         [G, H, Dk]            float32 / bfloat16 / float16: the requests' queries
//   k, v      [B, S, KVH, W]        the cache (same dtype as each other): block b's token s of kv
//                                   head h has its key at k[b, s, h, k_offset : k_offset + Dk] and
//                                   its value at v[b, s, h, v_offset : v_offset + Dv] (vLLM keeps
//                                   both in one buffer, passed twice; SGLang's are separate, S = 1)
//   table     [G, K] int32/int64    each request's blocks, in position order
//   position  [G] int32/int64       the query's position: keys 0..position are visible
//                                   (position - window < key when window > 0)
//   row       [G] int32/int64       optional: query g reads table row row[g] (table [R, K]), so
//                                   a ragged step's queries - several per request - share their
//                                   request's row instead of each carrying a copy
//   result    [G, H, Dv] float32
//
// Query head j uses kv head j / (H / KVH) (grouped-query attention). Scores are
// scale * q.k, soft-capped as cap * tanh(score / cap) when soft_cap > 0, softmaxed in float32.
#pragma once

namespace tpu::host_kernels {

constexpr const char* kPagedDecodeAttention = "torch_tpu_paged_decode_attention";

// The XLA FFI handler (an XLA_FFI_Handler*).
void* paged_decode_attention_handler();

}  // namespace tpu::host_kernels
