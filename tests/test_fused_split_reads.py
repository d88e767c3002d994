"""Fused Eager splits a graph flushed by a host read (`loss.item()`) into the read value's
dependencies and the rest, launched back to back: results equal Strict and the CPU, each step
replays the same two cached programs, the read does not wait for the rest, and
TORCH_TPU_FUSE_SPLIT_READS=0 restores one program per flush. The split is on by default; it is
also set on explicitly here (TORCH_TPU_FUSE_SPLIT_READS=1) unless a test says otherwise."""

import time

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.execution_mode import EagerMode, mode

VOCAB, DIM, BATCH, SEQ = 32, 16, 4, 8


@pytest.fixture(autouse=True)
def split_on(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FUSE_SPLIT_READS", "1")


class TinyLM(torch.nn.Module):
    """Embedding, a normalised MLP block and a head: forward, backward and AdamW in a few ops."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.norm = torch.nn.LayerNorm(DIM)
        self.up = torch.nn.Linear(DIM, 2 * DIM)
        self.down = torch.nn.Linear(2 * DIM, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB)

    def forward(self, x, y):
        h = self.emb(x)
        h = h + self.down(F.gelu(self.up(self.norm(h))))
        return F.cross_entropy(self.head(h).flatten(0, 1), y.flatten())


def batch():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def train(device, steps, read_every, on_step=None):
    """Losses read every `read_every` steps and the final parameters (on the CPU)."""
    torch.manual_seed(0)
    model = TinyLM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    x, y = (t.to(device) for t in batch())
    losses = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        if (step + 1) % read_every == 0:
            losses.append(loss.item())  # a host read after the optimizer step
        if on_step is not None:
            on_step(step)
    return torch.tensor(losses), [p.detach().cpu() for p in model.parameters()]


def stats():
    return torch.tpu.compilation_cache_stats()


@pytest.mark.parametrize("read_every", [1, 3])
def test_training_loop_with_reads_matches_strict_and_cpu(read_every, no_fallback):
    steps = 6
    cpu_losses, cpu_params = train("cpu", steps, read_every)
    with mode(EagerMode.STRICT):
        strict_losses, strict_params = train("tpu", steps, read_every)
    before = stats()
    with mode(EagerMode.FUSED):
        fused_losses, fused_params = train("tpu", steps, read_every)
    after = stats()
    # Every read flushed a step's graph as two programs.
    assert after["fused_split_reads"] - before["fused_split_reads"] == steps // read_every
    assert len(fused_losses) == steps // read_every
    torch.testing.assert_close(fused_losses, strict_losses, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fused_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    for f, s, c in zip(fused_params, strict_params, cpu_params):
        torch.testing.assert_close(f, s, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(f, c, rtol=1e-3, atol=2e-4)  # AdamW divides by sqrt(v): loose


def _programs_per_step(steps=5, warm=3):
    """Per step after warm-up: (programs executed, split flushes, graph compiles, replays)."""
    snaps = []
    with mode(EagerMode.FUSED):
        losses, params = train("tpu", steps, 1, on_step=lambda _: snaps.append(stats()))
    first, last = snaps[warm - 1], snaps[-1]
    n = steps - warm
    return (losses, params,
            {k: (last[k] - first[k]) / n for k in
             ("executions", "fused_split_reads", "fused_graph_compiles", "fused_graph_replays")})


def test_each_step_replays_two_cached_programs(no_fallback):
    _, _, per_step = _programs_per_step()
    assert per_step == {"executions": 2, "fused_split_reads": 1, "fused_graph_compiles": 0,
                        "fused_graph_replays": 1}


def test_disabling_the_split_restores_one_program(monkeypatch):
    split_losses, split_params, _ = _programs_per_step()
    monkeypatch.setenv("TORCH_TPU_FUSE_SPLIT_READS", "0")
    losses, params, per_step = _programs_per_step()
    assert per_step == {"executions": 1, "fused_split_reads": 0, "fused_graph_compiles": 0,
                        "fused_graph_replays": 1}
    torch.testing.assert_close(losses, split_losses, rtol=1e-6, atol=1e-7)
    for a, b in zip(params, split_params):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def _read_then_rest(x, w):
    """A cheap read value and a long chain of matrix products that does not feed it."""
    v = (x * 2).sum()
    z = w
    for _ in range(12):
        z = torch.tanh(z @ w)
    return v, z


def _time_read(x, w):
    """(seconds the read took, best of three; most seconds the rest still ran after it)."""
    reads, rests = [], []
    for _ in range(3):
        v, z = _read_then_rest(x, w)
        start = time.perf_counter()
        v.item()
        mid = time.perf_counter()
        torch.tpu.synchronize()
        reads.append(mid - start)
        rests.append(time.perf_counter() - mid)
        del z
    return min(reads), max(rests)


def test_the_split_is_on_by_default_also_on_the_cpu_plugin(monkeypatch):
    """Unset, the variable means split, on every plugin (the trade-off on the XLA CPU plugin is
    measured by benchmarks/fused_vs_strict.py)."""
    monkeypatch.delenv("TORCH_TPU_FUSE_SPLIT_READS")
    assert torch.tpu.get_device_properties(0).device_kind.lower() == "cpu"
    _, _, per_step = _programs_per_step()
    assert per_step["executions"] == 2 and per_step["fused_split_reads"] == 1, per_step


@pytest.mark.timing
def test_read_returns_before_the_rest_completes(monkeypatch):
    g = torch.Generator().manual_seed(0)
    x_cpu, w_cpu = torch.randn(4, 4, generator=g), torch.randn(768, 768, generator=g) / 30
    x, w = x_cpu.to("tpu"), w_cpu.to("tpu")
    with mode(EagerMode.FUSED):
        torch.tpu.synchronize()
        v, z = _read_then_rest(x, w)  # warm-up: compiles the two parts
        torch.testing.assert_close(v.item(), (x_cpu * 2).sum().item(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(z.cpu(), _read_then_rest(x_cpu, w_cpu)[1], rtol=1e-4, atol=1e-5)
        split_read, split_rest = _time_read(x, w)
        monkeypatch.setenv("TORCH_TPU_FUSE_SPLIT_READS", "0")
        _read_then_rest(x, w)[0].item()  # warm-up: compiles the whole graph
        whole_read, whole_rest = _time_read(x, w)
    # Split, the read waits for its few ops only and the chain can still be running afterwards;
    # whole, the read waits for the chain too.
    assert split_read < 0.5 * whole_read, (split_read, whole_read)
    assert split_rest > whole_rest, (split_rest, whole_rest)


def test_buffers_shared_between_the_parts_keep_their_values(no_fallback):
    """The read's part overwrites a tensor whose old value the rest reads, and the rest
    overwrites a tensor the read's part reads: neither part may take the other's buffer."""
    g = torch.Generator().manual_seed(0)
    a0, b0 = torch.randn(16, 16, generator=g), torch.randn(16, 16, generator=g)

    def run(device):
        a, b = a0.clone().to(device), b0.clone().to(device)
        u = a * 2          # the rest reads a's old value ...
        a.mul_(3)          # ... which the read's part overwrites
        v = (a + b).sum()  # the read's part reads b ...
        for _ in range(10):
            b.add_(1)      # ... which the rest overwrites
            u = u + b
        return v.item(), a.cpu(), b.cpu(), u.cpu()

    cpu = run("cpu")
    before = stats()["fused_split_reads"]
    with mode(EagerMode.FUSED):
        torch.tpu.synchronize()
        fused = run("tpu")
    assert stats()["fused_split_reads"] == before + 1
    torch.testing.assert_close(fused[0], cpu[0], rtol=1e-5, atol=1e-4)
    for f, c in zip(fused[1:], cpu[1:]):
        torch.testing.assert_close(f, c, rtol=1e-5, atol=1e-5)


def test_random_streams_match_strict_across_a_split():
    def run():
        torch.tpu.manual_seed(5)
        r = torch.rand(32, device="tpu")
        v = r.sum()
        n = torch.randn(32, device="tpu")
        for _ in range(8):
            n = n * 0.5 + 1
        d = F.dropout(n, p=0.5)
        out = v.item()
        after = torch.rand(8, device="tpu")  # the generator's offset moved past the split's draws
        return torch.tensor(out), r.cpu(), n.cpu(), d.cpu(), after.cpu()

    with mode(EagerMode.STRICT):
        strict = run()
    before = stats()["fused_split_reads"]
    with mode(EagerMode.FUSED):
        fused = run()
    assert stats()["fused_split_reads"] == before + 1
    for f, s in zip(fused, strict):
        torch.testing.assert_close(f, s, rtol=1e-6, atol=1e-6)
