"""Causal grouped-query attention over KV windows gathered from a paged cache.

Each engine gathers, for a group of requests, the keys and values of every request's sequence
into a [G, S, kv_heads, head_size] window (key s sits at position s), and lays the group's
queries out as [G, L, heads, head_size] with each query's position. A query sees the keys at
positions <= its own (the cache written before and by this step), optionally within a sliding
window; grouped-query heads share their kv head without copies. Shapes depend only on the
bucketed G, L and S, so one program serves every batch of a bucket. Scores and softmax are
float32 whatever the cache dtype, as PyTorch's SDPA math path computes them.
"""

import torch


def grouped_attention(q, k, v, q_pos, scale: float, soft_cap: float | None = None,
                      sliding_window: int | None = None) -> torch.Tensor:
    """q [G, L, H, D], k and v [G, S, KVH, D], q_pos [G, L] int64 -> [G, L, H, D] float32."""
    groups, length, heads, head_size = q.shape
    keys, kv_heads = k.shape[1], k.shape[2]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads do not group over {kv_heads} kv heads")
    qf = q.float().reshape(groups, length, kv_heads, heads // kv_heads, head_size)
    scores = torch.einsum("glhqd,gshd->ghqls", qf, k.float()) * scale
    if soft_cap:
        scores = soft_cap * torch.tanh(scores / soft_cap)
    key_pos = torch.arange(keys, device=q.device, dtype=torch.int64)[None, None, :]
    pos = q_pos.long()[:, :, None]
    visible = key_pos <= pos
    if sliding_window is not None and sliding_window > 0:
        visible = visible & (key_pos > pos - sliding_window)
    scores = scores.masked_fill(~visible[:, None, None], float("-inf"))
    # Padding queries carry position 0, so every row sees at least key 0 (no NaN rows).
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("ghqls,gshd->glhqd", probs, v.float())
    return out.reshape(groups, length, heads, head_size)
