"""Training the reference Llama across ranks, shared by the DDP, FSDP2 and checkpoint tests and the
scaling benchmark: the same initial weights and the same global batches on every rank, each rank
training on its slice; and the single-process run on the global batch to compare with."""

import os
import sys
import threading

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models.llama import Llama, LlamaConfig  # noqa: E402

CONFIG = LlamaConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=64, max_seq_len=16)
GLOBAL_BATCH = 4
SEQ = 12
LR = 0.05


_init_lock = threading.Lock()
_init_cache = {}


def initial_state(config=CONFIG):
    """The model's initial weights (drawn once: module init uses the global RNG, which ranks
    that are threads of one process would otherwise draw from concurrently)."""
    with _init_lock:
        if repr(config) not in _init_cache:
            torch.manual_seed(0)
            _init_cache[repr(config)] = Llama(config).state_dict()
        return {k: v.clone() for k, v in _init_cache[repr(config)].items()}


def global_batches(steps, config=CONFIG, batch=GLOBAL_BATCH, seq=SEQ):
    g = torch.Generator().manual_seed(1)
    return [Llama.example_batch(config, batch=batch, seq=seq, generator=g) for _ in range(steps)]


def local_slice(x, rank, world_size):
    per = x.shape[0] // world_size
    return x[rank * per:(rank + 1) * per]


def train_slices(model, rank, world_size, steps, device="tpu", foreach=None):
    """SGD on this rank's slice of each global batch; returns the local losses."""
    opt = torch.optim.SGD(model.parameters(), lr=LR, foreach=foreach)
    losses = []
    for x, y in global_batches(steps):
        opt.zero_grad()
        loss = model(local_slice(x, rank, world_size).to(device), local_slice(y, rank, world_size).to(device))
        loss.backward()
        opt.step()
        losses.append(loss.float().item())
    return losses


def train_single(device, steps, config=CONFIG):
    """The reference: one process, the global batch. Returns (losses, final state on the CPU)."""
    model = Llama(config)
    model.load_state_dict(initial_state(config))
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for x, y in global_batches(steps, config):
        opt.zero_grad()
        loss = model(x.to(device), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}
