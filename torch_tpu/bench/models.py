"""Built-in training steps for ``python -m torch_tpu.bench host`` (small models of two kinds)."""

from __future__ import annotations

import torch
from torch import nn


def _mlp():
    layers = []
    for _ in range(3):
        layers += [nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(256, 10)), (torch.randn(64, 256),), torch.randint(0, 10, (64,))


def _transformer():
    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(512, 128)
            self.layers = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True), num_layers=2,
                enable_nested_tensor=False)
            self.head = nn.Linear(128, 10)

        def forward(self, tokens):
            return self.head(self.layers(self.embed(tokens)).mean(dim=1))

    return Encoder(), (torch.randint(0, 512, (16, 32)),), torch.randint(0, 10, (16,))


BUILTIN_MODELS = {"mlp": _mlp, "transformer": _transformer}


def builtin_step(name: str, *, compiled: bool = False, read_every: int = 1, device: str = "tpu"):
    """A training step (forward, cross-entropy, backward, AdamW) of a built-in model on `device`;
    the loss is read on the host every `read_every` calls. The step returns the loss tensor."""
    torch.manual_seed(0)
    model, inputs, target = BUILTIN_MODELS[name]()
    model = model.to(device)
    inputs = tuple(t.to(device) for t in inputs)
    target = target.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = torch.compile(model, backend="tpu") if compiled else model
    calls = [0]

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(forward(*inputs), target)
        loss.backward()
        opt.step()
        calls[0] += 1
        if calls[0] % read_every == 0:
            loss.item()
        return loss

    return step
