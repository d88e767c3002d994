"""DLRM: sparse features through EmbeddingBag tables (with offsets), dense features through a
bottom MLP, pairwise dot-product interaction, top MLP, binary cross-entropy loss."""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class DLRMConfig:
    dense_features: int = 13
    table_sizes: list = field(default_factory=lambda: [100, 50, 80])
    embedding_dim: int = 16
    bottom: list = field(default_factory=lambda: [32, 16])
    top: list = field(default_factory=lambda: [32, 1])


def mlp(sizes, last_activation=True):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, cfg=None):
        super().__init__()
        cfg = cfg or DLRMConfig()
        self.cfg = cfg
        self.tables = nn.ModuleList([nn.EmbeddingBag(n, cfg.embedding_dim, mode="sum") for n in cfg.table_sizes])
        self.bottom = mlp([cfg.dense_features] + cfg.bottom)
        n = len(cfg.table_sizes) + 1
        self.top = mlp([cfg.embedding_dim + n * (n - 1) // 2] + cfg.top, last_activation=False)

    def forward(self, dense, indices, offsets, labels=None):
        x = self.bottom(dense)
        features = [x] + [table(idx, off) for table, idx, off in zip(self.tables, indices, offsets)]
        z = torch.stack(features, dim=1)                      # [B, F, D]
        dots = torch.bmm(z, z.transpose(1, 2))                # pairwise interactions
        i, j = torch.tril_indices(z.shape[1], z.shape[1], offset=-1)
        interactions = dots[:, i, j]
        logits = self.top(torch.cat([x, interactions], dim=1)).squeeze(1)
        if labels is None:
            return logits
        return F.binary_cross_entropy(torch.sigmoid(logits), labels)

    @staticmethod
    def example_batch(cfg=None, batch=8, max_per_bag=4, generator=None):
        cfg = cfg or DLRMConfig()
        dense = torch.randn(batch, cfg.dense_features, generator=generator)
        indices, offsets = [], []
        for n in cfg.table_sizes:
            lengths = torch.randint(1, max_per_bag + 1, (batch,), generator=generator)
            offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]))
            indices.append(torch.randint(0, n, (int(lengths.sum()),), generator=generator))
        labels = torch.randint(0, 2, (batch,), generator=generator).float()
        return dense, indices, offsets, labels
