"""The ``tpu`` attention backend for SGLang: paged KV in device memory, read inside a step program.

SGLang's KV pool keeps one key and one value buffer per layer, [slots, kv heads, head size], on
the device; its request table (``req_to_token``) maps each request's token positions to slots and
stays on the host here. A step program (``step_runner``) packs each request's slot row into its
metadata, so the attention groups' "block table" is a table of slots (block size 1). Per layer
the backend writes the step's keys and values at their slots; a ragged step's one group (every
token) or the decodes read them in place (``torch_tpu.serving.paged_attention``), a split step's
prefill groups gather their keys and values and run
``torch_tpu.serving.attention.grouped_attention``. It only runs inside a step
program: SGLang's own ForwardBatch path never reaches it.
"""

import torch
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

from torch_tpu.serving.attention import grouped_attention
from torch_tpu.serving.paged_attention import decode_attention


class TpuAttentionBackend(AttentionBackend):
    def __init__(self, model_runner):
        super().__init__()
        self.device = model_runner.device
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.step = None  # the step's StepInputs while a step program records

    def init_forward_metadata(self, forward_batch):
        raise RuntimeError(
            "the tpu attention backend runs inside torch_tpu's step program, which replaces SGLang's "
            "ForwardBatch path on tpu (torch_tpu.sglang.step_runner); this batch reached it directly"
        )

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        step = self.step
        if step is None:
            self.init_forward_metadata(forward_batch)
        pool = self.token_to_kv_pool
        k_cache = pool.get_key_buffer(layer.layer_id)
        v_cache = pool.get_value_buffer(layer.layer_id)
        heads, kv_heads = layer.tp_q_head_num, layer.tp_k_head_num
        qk_dim, v_dim = layer.qk_head_dim, layer.v_head_dim
        t = q.shape[0]
        if save_kv_cache and k is not None and v is not None:
            k_cache.index_copy_(0, step.kv_slots, k.reshape(t, kv_heads, qk_dim).to(k_cache.dtype))
            v_cache.index_copy_(0, step.kv_slots, v.reshape(t, kv_heads, v_dim).to(v_cache.dtype))
        q_all = q.reshape(t, heads, qk_dim)
        window = layer.sliding_window_size if (layer.sliding_window_size or -1) > 0 else None
        result = torch.zeros(t + 1, heads, v_dim, dtype=torch.float32, device=q.device)
        for g in step.groups:
            size, length = g.token_index.shape
            slots = g.block_table  # [G or R, S]: the KV slot of every key position (block size 1)
            q_g = q_all[g.token_index.reshape(-1)].reshape(size, length, heads, qk_dim)
            if length == 1:  # decodes read the cache slots in place where the plugin can
                out = decode_attention(q_g[:, 0], k_cache[:, None], v_cache[:, None], slots, g.position[:, 0],
                                       g.table_row, scale=layer.scaling, soft_cap=layer.logit_cap or None,
                                       window=window, v_dim=v_dim)
            else:
                out = grouped_attention(q_g, k_cache[slots], v_cache[slots], g.position, layer.scaling,
                                        layer.logit_cap or None, window)
            result.index_copy_(0, torch.where(g.write_index < 0, t, g.write_index), out.reshape(size * length, heads, v_dim))
        return result[:t].reshape(t, heads * v_dim).to(q.dtype)


def create_backend(model_runner):
    """SGLang's attention-registry factory for ``--attention-backend tpu``."""
    return TpuAttentionBackend(model_runner)
