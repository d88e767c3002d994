"""The Llama-style training step the benchmarks time: the main job's model configuration, a
fixed batch, forward + backward + AdamW."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from models.llama import Llama, LlamaConfig  # noqa: E402


def make(device, dim=128, layers=2, batch=16, seq=64, seed=0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=256, dim=dim, n_layers=layers, n_heads=4, n_kv_heads=2,
                      hidden_dim=dim * 4, max_seq_len=seq)
    model = Llama(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, 256, (batch, seq + 1), generator=g)
    x, y = tokens[:, :-1].to(device), tokens[:, 1:].to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss.item()  # the host reads the loss every step, as a training loop logs it

    return step
