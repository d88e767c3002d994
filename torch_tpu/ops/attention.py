"""``splash_sdpa``: the original TorchTPU's splash-attention entry point, on our attention
lowering (``F.scaled_dot_product_attention``: one fused program per shape, with autograd).

The mask is the splash kernel's: causal by default; with ``local_window_size`` w, query i sees
keys i - w .. i (sliding-window causal); with ``is_causal=False`` and no window, every key. The
scale defaults to 1/sqrt(head_dim). The block sizes, layouts and backward-kernel switches tune the
Pallas kernel on a TPU; they are accepted and validated here and change nothing on our lowering
(which XLA tiles itself). Inputs are (batch, heads, seq, head_dim); ``enable_gqa`` must say whether
k and v have fewer heads than q."""

import torch
import torch.nn.functional as F

_LAYOUTS = ("HEAD_DIM_MINOR", "SEQ_MINOR")


def _window_mask(seq_q, seq_k, window, device):
    i = torch.arange(seq_q, device=device).unsqueeze(1)
    j = torch.arange(seq_k, device=device).unsqueeze(0)
    return (j <= i) & (j >= i - window)


def splash_sdpa(q, k, v, *, scale=None, is_causal=True, local_window_size=None, enable_gqa=False,
                block_q=512, block_kv=512, block_dkv=512, block_kv_compute=512, block_q_dkv=512,
                block_kv_dkv=512, block_kv_dkv_compute=512, block_q_dq=None, block_kv_dq=None,
                use_fused_bwd_kernel=True, use_vmap_bwd=True, q_layout="HEAD_DIM_MINOR",
                k_layout="HEAD_DIM_MINOR", v_layout="HEAD_DIM_MINOR"):
    """Attention of q over k, v with the splash kernel's masks (see the module docstring)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("splash_sdpa expects q, k, v of shape (batch, heads, seq, head_dim)")
    for name, layout in (("q_layout", q_layout), ("k_layout", k_layout), ("v_layout", v_layout)):
        if layout not in _LAYOUTS:
            raise ValueError(f"splash_sdpa: {name} must be one of {_LAYOUTS}, got {layout!r}")
    n_heads, n_kv_heads = q.shape[1], k.shape[1]
    if enable_gqa != (n_heads != n_kv_heads):
        raise ValueError(f"splash_sdpa: enable_gqa={enable_gqa} does not match the inputs: "
                         f"q has {n_heads} heads, k and v {n_kv_heads}")
    if local_window_size is not None:
        if local_window_size < 0:
            raise ValueError(f"splash_sdpa: local_window_size must be >= 0, got {local_window_size}")
        mask = _window_mask(q.shape[2], k.shape[2], local_window_size, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
