"""The Llama-style training step the benchmarks time: forward + backward + AdamW on a fixed batch.

Sizes: "reference" is models.Llama's own small configuration (dim 64, 2 layers, batch 2 x 32
tokens - the model the tests train); "main" is the main job's (dim 128, 2 layers, batch 16 x 64).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from models.llama import Llama, LlamaConfig  # noqa: E402


SIZES = {
    "reference": dict(dim=64, hidden=128, batch=2, seq=32),
    "main": dict(dim=128, hidden=512, batch=16, seq=64),
}


def make(device, size="reference", seed=0):
    torch.manual_seed(seed)
    s = SIZES[size]
    dim, batch, seq = s["dim"], s["batch"], s["seq"]
    cfg = LlamaConfig(vocab_size=256, dim=dim, n_layers=2, n_heads=4, n_kv_heads=2,
                      hidden_dim=s["hidden"], max_seq_len=64)
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
