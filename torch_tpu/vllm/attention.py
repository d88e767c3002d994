"""Paged attention for vLLM on ``tpu``, built from plain PyTorch ops that run on the device.

KV cache: one tensor per layer, logical shape [num_blocks, num_kv_heads, block_size,
2 * head_size] (keys then values in the last axis) stored block-major as [blocks, block_size,
heads, 2 * head_size] (vLLM's LBNHC layout), so a block's tokens are rows of one flat
[num_slots, heads, 2 * head_size] view that slot-mapping writes address directly.

Attention: on a plugin whose attention reads the cache in place (the CPU plugin's host kernel,
``torch_tpu.serving.paged_attention``), the step program's one ragged group holds every token,
each reading its request's blocks where they lie. Elsewhere the batch's requests split into
decodes (one query token) and prefills (several: prompts, chunks of them, prompts after a
prefix-cache hit). Each group is laid out as [requests, query tokens]. Decodes read their
blocks through ``paged_attention``'s portable formulation; prefills gather their requests' KV blocks into a [requests, S, kv heads, head_size]
window attended by ``torch_tpu.serving.attention`` (causal over cache and chunk, grouped-query
heads without copies). Request counts, query lengths and key blocks are rounded up
to powers of two (padding rows write to a scratch row; padding tokens' cache writes go to the
null block 0, which vLLM never hands to a request), so the attention depends only on bucketed
shapes and never reads the device from the host.

The groups (``AttentionGroup``) come from one of two places: the one-program step runner
(``model_runner.py``) derives them on the device from the step's packed metadata; the runner
paths of ``TORCH_TPU_VLLM_MODE=fused|eager|compile`` get them from vLLM's metadata builder below.
"""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)
from vllm.v1.kv_cache_interface import KVCacheLayout

from torch_tpu.serving.attention import AttentionGroup, grouped_attention
from torch_tpu.serving.paged_attention import decode_attention


class TpuTorchAttentionBackend(AttentionBackend):
    # vLLM writes the cache (do_kv_cache_update) before forward reads it.
    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float32", "bfloat16", "float16"]

    @staticmethod
    def get_name() -> str:
        # vLLM's registry has no entry for out-of-tree backends; CUSTOM is its slot for them.
        return "CUSTOM"

    @staticmethod
    def get_impl_cls():
        return TpuTorchAttentionImpl

    @staticmethod
    def get_builder_cls():
        return TpuTorchAttentionMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [MultipleOf(1)]

    @classmethod
    def supported_kv_cache_layouts(cls):
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


@dataclass
class TpuTorchAttentionMetadata:
    num_actual_tokens: int
    slot_mapping: torch.Tensor  # [num_actual_tokens] int64, device
    groups: list  # of AttentionGroup: decodes, then prefills


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class TpuTorchAttentionMetadataBuilder(AttentionMetadataBuilder[TpuTorchAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size

    def _group(self, requests, query_len, query_start, seq_lens, table, length):
        real = len(requests)
        size = _pow2(real)
        reqs = np.concatenate([requests, np.full(size - real, requests[0], dtype=np.int64)])
        is_real = (np.arange(size) < real)[:, None]
        j = np.arange(length, dtype=np.int64)[None, :]
        qlen = query_len[reqs][:, None]
        valid = is_real & (j < qlen)
        token = query_start[reqs][:, None] + j
        position = np.where(valid, seq_lens[reqs][:, None] - qlen + j, 0)
        width = table.shape[1]
        key_blocks = min(_pow2(-(-int(seq_lens[requests].max()) // self.block_size)), width)
        dev = self.device
        reqs_dev = torch.from_numpy(reqs).to(dev)
        return AttentionGroup(
            token_index=torch.from_numpy(np.where(valid, token, 0)).to(dev),
            write_index=torch.from_numpy(np.where(valid, token, -1).reshape(-1)).to(dev),
            position=torch.from_numpy(position).to(dev),
            block_table=table[reqs_dev, :key_blocks].to(torch.int64),
        )

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> TpuTorchAttentionMetadata:
        m = common_attn_metadata
        num_reqs, num_tokens = m.num_reqs, m.num_actual_tokens
        query_start = m.query_start_loc_cpu[: num_reqs + 1].numpy().astype(np.int64)
        query_len = np.diff(query_start)
        # Exact here: no asynchronous scheduling or speculative decoding on tpu.
        seq_cpu = m.seq_lens_cpu_upper_bound
        if seq_cpu is None:
            seq_cpu = m.seq_lens[:num_reqs].cpu()
        seq_lens = seq_cpu[:num_reqs].numpy().astype(np.int64)
        table = m.block_table_tensor
        groups = []
        decodes = np.nonzero(query_len == 1)[0]
        prefills = np.nonzero(query_len > 1)[0]
        if len(decodes):
            groups.append(self._group(decodes, query_len, query_start, seq_lens, table, 1))
        if len(prefills):
            length = _pow2(int(query_len[prefills].max()))
            groups.append(self._group(prefills, query_len, query_start, seq_lens, table, length))
        return TpuTorchAttentionMetadata(
            num_actual_tokens=num_tokens,
            slot_mapping=m.slot_mapping[:num_tokens].to(torch.int64),
            groups=groups,
        )


class TpuTorchAttentionImpl(AttentionImpl[TpuTorchAttentionMetadata]):
    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes=None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        **kwargs,
    ) -> None:
        if alibi_slopes is not None:
            raise NotImplementedError("ALiBi attention is not supported on tpu yet.")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"attention type {attn_type} is not supported on tpu yet.")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{num_heads} query heads do not group over {self.num_kv_heads} kv heads")
        self.sliding_window = sliding_window
        self.kv_cache_dtype = kv_cache_dtype
        self.logits_soft_cap = logits_soft_cap
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    @staticmethod
    def _slots_view(kv_cache: torch.Tensor) -> torch.Tensor:
        # logical [B, H, N, C] over physical [B, N, H, C] -> [B * N, H, C], a view.
        blocks, heads, block_size, width = kv_cache.shape
        return kv_cache.transpose(1, 2).reshape(blocks * block_size, heads, width)

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        if kv_cache.numel() == 0:
            return
        num_tokens = slot_mapping.shape[0]
        rows = torch.cat([key[:num_tokens], value[:num_tokens]], dim=-1).to(kv_cache.dtype)
        # Padding tokens carry slot -1 (PAD_SLOT_ID); they write slot 0, in vLLM's null block,
        # which no request's attention reads. No host read: the shapes stay bucketed.
        slots = slot_mapping.to(torch.int64).clamp(min=0)
        self._slots_view(kv_cache).index_copy_(0, slots, rows)

    def forward(
        self,
        layer,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: TpuTorchAttentionMetadata | None,
        output: torch.Tensor,
        output_scale=None,
        output_block_scale=None,
    ) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported on tpu")
        if attn_metadata is None:  # profiling run without a cache
            return output.fill_(0)
        m = attn_metadata
        # All (padded) tokens: shapes depend on the bucketed token count only.
        t = query.shape[0]
        hs, heads, kv_heads = self.head_size, self.num_heads, self.num_kv_heads
        q_all = query.reshape(t, heads, hs)
        phys = kv_cache.transpose(1, 2)  # [blocks, block_size, kv heads, 2 * head_size]
        # One spare row (index t) takes the padding slots' results.
        result = torch.zeros(t + 1, heads, hs, dtype=torch.float32, device=query.device)
        for g in m.groups:
            size, length = g.token_index.shape
            q = q_all[g.token_index.reshape(-1)].reshape(size, length, heads, hs)
            if length == 1:  # decodes read the cache blocks in place where the plugin can
                out = decode_attention(q[:, 0], phys, phys, g.block_table, g.position[:, 0], g.table_row,
                                       scale=self.scale, soft_cap=self.logits_soft_cap, window=self.sliding_window,
                                       v_offset=hs)
            else:
                window = phys[g.block_table]  # [G, key_blocks, block_size, kv heads, 2 * head_size]
                window = window.reshape(size, window.shape[1] * window.shape[2], kv_heads, 2 * hs)
                out = grouped_attention(q, window[..., :hs], window[..., hs:], g.position, self.scale,
                                        self.logits_soft_cap, self.sliding_window)
            write = torch.where(g.write_index < 0, t, g.write_index)
            result.index_copy_(0, write, out.reshape(size * length, heads, hs))
        output.copy_(result[:t].reshape(output.shape).to(output.dtype))
        return output
