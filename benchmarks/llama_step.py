"""The Llama-style training step the benchmarks time: forward + backward + AdamW on a fixed batch.

Sizes: "reference" is models.Llama's own small configuration (dim 64, 2 layers, batch 2 x 32
tokens - the model the tests train); "main" is the main job's (dim 128, 2 layers, batch 16 x 64);
"tiny" has the same layers with tensors of a few elements (a measure of host work alone).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from models.llama import Llama, LlamaConfig  # noqa: E402


SIZES = {
    "reference": dict(dim=64, hidden=128, batch=2, seq=32),
    "main": dict(dim=128, hidden=512, batch=16, seq=64),
    # The same layers and ops with every tensor shrunk to a few elements: on the CPU its step
    # time is almost only PyTorch's own host work (Python, dispatcher, autograd, optimizer).
    "tiny": dict(dim=8, hidden=8, batch=1, seq=2),
}


def train_body(model, opt, x, y):
    """Forward, backward and the optimizer step on (x, y), returning the detached loss: the body
    every benchmark of the Llama step times (and compiles, where it compiles)."""

    def body():
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss.detach()

    return body


def make(device, size="reference", seed=0, compiled=False):
    """The step as a function returning the loss. `compiled`: forward, backward and AdamW as one
    torch.compile(backend="tpu") graph (a capturable optimizer keeps its step count on the device)."""
    torch.manual_seed(seed)
    s = SIZES[size]
    dim, batch, seq = s["dim"], s["batch"], s["seq"]
    cfg = LlamaConfig(vocab_size=256, dim=dim, n_layers=2, n_heads=4, n_kv_heads=2,
                      hidden_dim=s["hidden"], max_seq_len=64)
    model = Llama(cfg).to(device)
    # foreach=True on every device: PyTorch's default picks the foreach implementation for
    # accelerators but the per-tensor loop on the CPU, and the host-work ceiling ("tiny" on the
    # CPU) must run the same optimizer code as the tpu contenders.
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, capturable=compiled, foreach=True)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, 256, (batch, seq + 1), generator=g)
    x, y = tokens[:, :-1].to(device), tokens[:, 1:].to(device)

    body = train_body(model, opt, x, y)

    if compiled:
        body = torch.compile(body, backend="tpu")

    def step(read=True):
        opt.zero_grad(set_to_none=True)
        loss = body()
        # By default the host reads the loss every step, as a training loop logs it; read=False
        # returns the loss tensor unread (a loop that logs every N steps).
        return loss.item() if read else loss

    return step
