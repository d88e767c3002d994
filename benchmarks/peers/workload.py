"""The workload every contender of benchmarks/peers.py runs: the Llama-style training step of
benchmarks/llama_step.py (models/llama.py, AdamW) and the cached 8-element add of
benchmarks/dispatch.py.

The driver builds the model once on the CPU and saves its weights and batch; each worker, whatever
its torch version, loads them, so every contender starts from the same numbers. This file only
needs torch (any version from 2.9) and models/llama.py: the peers' interpreters import it too.
"""

import os
import sys

import torch

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Appended, not prepended: the root holds our torch_tpu, which must not shadow a peer's.
sys.path.append(os.path.dirname(BENCH))  # the repository root: models/
sys.path.append(BENCH)  # llama_step (its SIZES)

from models.llama import Llama, LlamaConfig  # noqa: E402
from llama_step import SIZES, train_body  # noqa: E402

VOCAB = 256


def config(size):
    # The same configuration as llama_step.make builds.
    s = SIZES[size]
    return LlamaConfig(vocab_size=VOCAB, dim=s["dim"], n_layers=2, n_heads=4, n_kv_heads=2,
                       hidden_dim=s["hidden"], max_seq_len=64)


def save(path, size, seed=0):
    """Writes the initial weights and the batch (tokens) of `size` to `path`."""
    torch.manual_seed(seed)
    model = Llama(config(size))
    s = SIZES[size]
    tokens = torch.randint(0, VOCAB, (s["batch"], s["seq"] + 1),
                           generator=torch.Generator().manual_seed(seed + 1))
    torch.save({"size": size, "state_dict": model.state_dict(), "tokens": tokens}, path)


def make_step(path, device, compile_fn=None, capturable=False, after_step=None):
    """The training step as a function returning the loss as a float. `compile_fn` wraps the
    forward + backward + AdamW body (torch.compile with some backend); `after_step` runs after
    the body (PyTorch/XLA's lazy mode cuts its graph there)."""
    saved = torch.load(path, weights_only=True)
    model = Llama(config(saved["size"]))
    model.load_state_dict(saved["state_dict"])
    model = model.to(device)
    # foreach=True everywhere: PyTorch picks the per-tensor loop on the CPU and foreach on
    # accelerators by default; every contender must run the same optimizer code.
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01,
                            capturable=capturable, foreach=True)
    tokens = saved["tokens"]
    x, y = tokens[:, :-1].to(device), tokens[:, 1:].to(device)

    body = train_body(model, opt, x, y)

    if compile_fn is not None:
        body = compile_fn(body)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = body()
        if after_step is not None:
            after_step()
        return loss.item()  # the host reads the loss every step, as a training loop logs it

    return step


def make_add(device, compile_fn=None):
    """The dispatch loop: `n` adds of two 8-element float32 tensors, then `finish()`. Returns
    (loop(n, finish), check()) where check compares one add against the CPU."""
    a_cpu = torch.randn(8, generator=torch.Generator().manual_seed(2))
    b_cpu = torch.randn(8, generator=torch.Generator().manual_seed(3))
    a, b = a_cpu.to(device), b_cpu.to(device)

    def add(p, q):
        return p + q

    fn = compile_fn(add) if compile_fn is not None else add

    def loop(n, finish):
        for _ in range(n):
            fn(a, b)
        finish()

    def check():
        torch.testing.assert_close(fn(a, b).cpu(), a_cpu + b_cpu)

    return loop, check
