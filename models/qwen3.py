"""A Qwen3-style decoder: the Llama-style decoder plus per-head RMSNorm of queries and keys."""

from dataclasses import dataclass

from torch import nn

from .llama import Attention, Block, Llama, LlamaConfig, RMSNorm


@dataclass
class Qwen3Config(LlamaConfig):
    tie_embeddings: bool = True


class QKNormAttention(Attention):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.q_norm = RMSNorm(self.head_dim, cfg.norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.norm_eps)

    def qk_norm(self, q, k):
        return self.q_norm(q), self.k_norm(k)


class Qwen3Block(Block):
    attention_class = QKNormAttention


class Qwen3(Llama):
    block_class = Qwen3Block

    def __init__(self, cfg=None):
        super().__init__(cfg or Qwen3Config())


__all__ = ["Qwen3", "Qwen3Config", "nn"]
