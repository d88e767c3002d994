"""Causal grouped-query attention over KV windows gathered from a paged cache.

Each engine gathers, for a group of requests, the keys and values of every request's sequence
into a [G, S, kv_heads, head_size] window (key s sits at position s), and lays the group's
queries out as [G, L, heads, head_size] with each query's position. A query sees the keys at
positions <= its own (the cache written before and by this step), optionally within a sliding
window; grouped-query heads share their kv head without copies. Shapes depend only on the
bucketed G, L and S, so one program serves every batch of a bucket. Scores and softmax are
float32 whatever the cache dtype, as PyTorch's SDPA math path computes them.
"""

from dataclasses import dataclass

import torch


@dataclass
class AttentionGroup:
    """Requests attended together, laid out [G requests (padded), L query tokens (padded)]."""

    token_index: torch.Tensor  # [G, L] int64: the step's token row of each query (0 for padding)
    write_index: torch.Tensor  # [G * L] int64: the output row of each query (-1: none)
    position: torch.Tensor  # [G, L] int64: the query's position in its sequence (0 for padding)
    block_table: torch.Tensor  # [G, key blocks] int64: the requests' KV table rows
    # [G] int64 or None: with it, block_table is [R, key blocks] and query g reads row
    # table_row[g] (a ragged step: one query per token, L = 1, its request's row shared)
    table_row: torch.Tensor | None = None


def grouped_attention(q, k, v, q_pos, scale: float, soft_cap: float | None = None,
                      sliding_window: int | None = None) -> torch.Tensor:
    """q [G, L, H, D], k [G, S, KVH, D], v [G, S, KVH, Dv], q_pos [G, L] int64 -> [G, L, H, Dv] float32."""
    groups, length, heads, head_size = q.shape
    keys, kv_heads = k.shape[1], k.shape[2]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads do not group over {kv_heads} kv heads")
    per_kv = heads // kv_heads
    key_pos = torch.arange(keys, device=q.device, dtype=torch.int64)[None, None, :]
    pos = q_pos.long()[:, :, None]
    visible = key_pos <= pos  # [G, L, S]
    if sliding_window is not None and sliding_window > 0:
        visible = visible & (key_pos > pos - sliding_window)
    if length == 1:
        # Decode: one query per request. Products and sums over the gathered window (XLA fuses
        # each into one loop) instead of G * kv_heads tiny batched matrix products, which also
        # need the window transposed.
        qf = q.float().reshape(groups, 1, kv_heads, per_kv, head_size)
        scores = (qf * k.float()[:, :, :, None, :]).sum(-1) * scale  # [G, S, KVH, Q]
        if soft_cap:
            scores = soft_cap * torch.tanh(scores / soft_cap)
        scores = scores.masked_fill(~visible[:, 0, :, None, None], float("-inf"))
        # Padding queries carry position 0, so every row sees at least key 0 (no NaN rows).
        probs = torch.softmax(scores, dim=1)
        out = (probs[..., None] * v.float()[:, :, :, None, :]).sum(1)  # [G, KVH, Q, D]
        return out.reshape(groups, 1, heads, v.shape[-1])
    qf = q.float().reshape(groups, length, kv_heads, per_kv, head_size)
    scores = torch.einsum("glhqd,gshd->ghqls", qf, k.float()) * scale
    if soft_cap:
        scores = soft_cap * torch.tanh(scores / soft_cap)
    scores = scores.masked_fill(~visible[:, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("ghqls,gshd->glhqd", probs, v.float())
    return out.reshape(groups, length, heads, v.shape[-1])
