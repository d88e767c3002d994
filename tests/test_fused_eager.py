"""Fused Eager on the reference models: the training steps (forward, backward, AdamW) give the
same results as Strict and Debug (and the CPU), a training loop compiles once and then only
replays (also when the size limit cuts each step into several graphs), and a loop with no host
reads is cut at its iteration boundary."""

import copy
import json
import os
import subprocess
import sys

import pytest
import torch

import torch_tpu
from device_marks import needs_two_devices
from torch_tpu.execution_mode import EagerMode, mode

from model_cases import cases, to_device

CASES = cases()


def make(name):
    make_model, make_batch, loss_fn = CASES[name]
    torch.manual_seed(0)
    model = make_model()
    batch = make_batch(torch.Generator().manual_seed(0))
    return model, batch, loss_fn


def train(model, batch, loss_fn, steps, read_loss=True):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model, *batch)
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu() if read_loss else loss.detach())
    return torch.stack([l.cpu() for l in losses]), [p.detach().cpu() for p in model.parameters()]


def run_in(m, name, steps=3, read_loss=True):
    model, batch, loss_fn = make(name)
    if m is None:
        return train(model, batch, loss_fn, steps, read_loss)
    with mode(m):
        return train(model.to("tpu"), to_device(batch, "tpu"), loss_fn, steps, read_loss)


@pytest.mark.parametrize("name", list(CASES))
def test_training_steps_agree_in_all_modes(name):
    torch_tpu.reset_fallback_counts()
    cpu_losses, cpu_params = run_in(None, name)
    strict_losses, strict_params = run_in(EagerMode.STRICT, name)
    debug_losses, debug_params = run_in(EagerMode.DEBUG, name)
    fused_losses, fused_params = run_in(EagerMode.FUSED, name)
    assert torch_tpu.fallback_counts() == {}
    # Debug runs the very same executables as Strict: bit-identical.
    assert torch.equal(debug_losses, strict_losses)
    for d, s in zip(debug_params, strict_params):
        assert torch.equal(d, s)
    # Fused compiles the step as one program (XLA may fuse and reorder float arithmetic);
    # ResNet-18's BatchNorm turns that rounding into visible noise (as in test_models.py).
    rtol = 0.05 if name == "resnet18" else 1e-4
    torch.testing.assert_close(fused_losses, strict_losses, rtol=rtol, atol=rtol * 0.1)
    torch.testing.assert_close(strict_losses, cpu_losses, rtol=max(rtol, 1e-3), atol=1e-4)
    # AdamW turns gradient rounding differences into steps of up to lr (1e-3) where a gradient
    # is near zero; ResNet's BatchNorm makes some gradients pure noise, whose sign can flip:
    # up to 2 * lr * steps apart (as in test_models.py, which compares its loss curve loosely).
    atol = 6e-3 if name == "resnet18" else 2e-4
    for f, s, c in zip(fused_params, strict_params, cpu_params):
        torch.testing.assert_close(f, s, rtol=1e-3, atol=atol)
        torch.testing.assert_close(s, c, rtol=1e-3, atol=atol)


def test_training_loop_compiles_once_then_replays():
    model, batch, loss_fn = make("llama")
    model, batch = model.to("tpu"), to_device(batch, "tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    snapshots = []
    with mode(EagerMode.FUSED):
        for _ in range(6):
            opt.zero_grad()
            loss = loss_fn(model, *batch)
            loss.backward()
            opt.step()
            loss.item()  # a host read: the step's graph runs here
            snapshots.append(torch.tpu.compilation_cache_stats())
    warm, last = snapshots[2], snapshots[-1]
    # Step 1 (creates AdamW's state) and step 2 differ; from then on every step replays.
    assert last["fused_graph_compiles"] == warm["fused_graph_compiles"]
    assert last["compiles"] == warm["compiles"]
    assert last["fused_graph_replays"] - warm["fused_graph_replays"] == 3
    assert last["fused_graphs_run"] - warm["fused_graphs_run"] == 3


def test_loop_without_host_reads_is_cut_at_iterations():
    strict_losses, strict_params = run_in(EagerMode.STRICT, "mingpt", steps=8, read_loss=False)
    model, batch, loss_fn = make("mingpt")
    model, batch = model.to("tpu"), to_device(batch, "tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    with mode(EagerMode.FUSED):
        before = torch.tpu.compilation_cache_stats()
        for step in range(8):
            opt.zero_grad()
            loss = loss_fn(model, *batch)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            if step == 4:
                middle = torch.tpu.compilation_cache_stats()
        end = torch.tpu.compilation_cache_stats()  # iteration 8 is still recorded, not run
        torch.tpu.synchronize()
    # Each iteration start closed the previous iteration's graph ...
    assert end["fused_flushes_by_repeat"] - before["fused_flushes_by_repeat"] == 7
    # ... and from iteration 3 on, those graphs were replays of one program.
    assert end["fused_graph_compiles"] == middle["fused_graph_compiles"]
    assert end["fused_graph_replays"] - middle["fused_graph_replays"] == 3
    torch.testing.assert_close(torch.stack([l.cpu() for l in losses]), strict_losses, rtol=1e-4, atol=1e-5)
    for p, s in zip(model.parameters(), strict_params):
        torch.testing.assert_close(p.detach().cpu(), s, rtol=1e-3, atol=2e-4)  # AdamW: see above


def test_temporaries_do_not_become_outputs():
    with mode(EagerMode.FUSED):
        x = torch.randn(32, 32, device="tpu")
        torch.tpu.synchronize()
        y = x
        for _ in range(10):
            y = torch.sin(y) * 2 + 1  # 30 ops, only the last value is alive
        before = torch.tpu.compilation_cache_stats()["fused_graphs_run"]
        out = y.cpu()
        assert torch.tpu.compilation_cache_stats()["fused_graphs_run"] == before + 1
    ref = x.cpu()
    for _ in range(10):
        ref = torch.sin(ref) * 2 + 1
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def _fused_loop_with_size_limit(read_loss):
    code = f"""
import json, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import torch, torch_tpu
from torch_tpu.execution_mode import EagerMode, mode
from model_cases import to_device
from test_fused_eager import make, train

def run(m, stats, device="tpu"):
    model, batch, loss_fn = make("llama")
    model, batch = model.to(device), to_device(batch, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    with mode(m):
        for step in range(7):
            opt.zero_grad()
            loss = loss_fn(model, *batch)
            loss.backward()
            opt.step()
            losses.append(loss.item() if {read_loss!r} else loss.detach())
            stats.append(torch.tpu.compilation_cache_stats())
        torch.tpu.synchronize()
    return [float(l) for l in losses], [p.detach().cpu().tolist() for p in model.parameters()]

cpu = run(EagerMode.STRICT, [], device="cpu")
strict = run(EagerMode.STRICT, [])
stats = []
fused = run(EagerMode.FUSED, stats)
print(json.dumps({{"cpu": cpu, "strict": strict, "fused": fused, "stats": [stats[2], stats[-1]]}}))
"""
    env = dict(os.environ, TORCH_TPU_FUSE_MAX_OPS="150")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("read_loss", [True, False], ids=["loss_read_each_step", "no_host_reads"])
def test_steps_cut_by_the_size_limit_compile_once_then_replay(read_loss):
    # A step longer than TORCH_TPU_FUSE_MAX_OPS is cut into several graphs; the cuts must fall at
    # the same points of every iteration, or each step compiles new graphs.
    got = _fused_loop_with_size_limit(read_loss)
    warm, last = got["stats"]
    assert last["fused_flushes_by_size"] - warm["fused_flushes_by_size"] >= 4 * 2  # >= 2 cuts per step
    assert last["fused_graph_compiles"] == warm["fused_graph_compiles"]
    assert last["compiles"] == warm["compiles"]
    assert last["fused_graph_replays"] > warm["fused_graph_replays"]
    (fused_losses, fused_params), (strict_losses, strict_params) = got["fused"], got["strict"]
    cpu_losses, cpu_params = got["cpu"]
    torch.testing.assert_close(torch.tensor(fused_losses), torch.tensor(strict_losses), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(fused_losses), torch.tensor(cpu_losses), rtol=1e-3, atol=1e-4)
    for f, s, c in zip(fused_params, strict_params, cpu_params):
        torch.testing.assert_close(torch.tensor(f), torch.tensor(s), rtol=1e-3, atol=2e-4)  # AdamW: see above
        torch.testing.assert_close(torch.tensor(f), torch.tensor(c), rtol=1e-3, atol=2e-4)


@needs_two_devices
def test_synchronize_and_events_flush_only_their_device():
    # One deferred graph per device: a synchronize or an event of one device leaves another
    # device's graph recording (ranks that run as threads would otherwise cut each other's graphs
    # at points that change from step to step, and compile new graphs every step).
    with mode("fused"):
        torch_tpu.execution_mode.flush()
        a = torch.arange(8.0, device="tpu:0") * 2 + 1
        b = torch.arange(8.0, device="tpu:1") * 3 + 1
        both = torch_tpu.execution_mode.pending_ops()
        torch.tpu.synchronize(0)
        left = torch_tpu.execution_mode.pending_ops()
        assert 0 < left < both  # device 1's ops are still deferred
        torch.tpu.Event(enable_timing=True).record(torch.tpu.current_stream(1))
        assert torch_tpu.execution_mode.pending_ops() == 0
        c = torch.arange(8.0, device="tpu:1") - 1
        torch.tpu.Event(enable_timing=True).record(torch.tpu.current_stream(0))
        assert torch_tpu.execution_mode.pending_ops() > 0
    torch.testing.assert_close(a.cpu(), torch.arange(8.0) * 2 + 1)
    torch.testing.assert_close(b.cpu(), torch.arange(8.0) * 3 + 1)
    torch.testing.assert_close(c.cpu(), torch.arange(8.0) - 1)


@pytest.mark.parametrize("make", [lambda: torch.tpu.current_stream().record_event(),
                                  lambda: torch.tpu.Event().record() or None,
                                  lambda: torch.Event(device="tpu").record() or None],
                         ids=["stream.record_event", "tpu.Event.record", "torch.Event.record"])
def test_an_event_without_timing_leaves_the_graph_recording(make):
    # FSDP2 records an event around every collective: cutting the graph at each split a step
    # into many programs. The event is deferred until it is asked about; then it launches the
    # graph and completes after it.
    with mode("fused"):
        torch_tpu.execution_mode.flush()
        x = torch.arange(8.0, device="tpu") * 2
        event = torch.tpu.current_stream().record_event()
        make()
        pending = torch_tpu.execution_mode.pending_ops()
        assert pending > 0  # nothing was launched by recording
        y = x + 1  # recorded after the event: the same graph
        assert torch_tpu.execution_mode.pending_ops() > pending
        torch.tpu.current_stream().wait_event(event)  # waiting from a stream: nothing to launch
        assert torch_tpu.execution_mode.pending_ops() > pending
        event.synchronize()
        assert torch_tpu.execution_mode.pending_ops() == 0 and event.query()
        z = y * 3
        later = torch.tpu.current_stream().record_event()
        later.query()  # asking about it launches the graph
        assert torch_tpu.execution_mode.pending_ops() == 0
    torch.testing.assert_close(z.cpu(), (torch.arange(8.0) * 2 + 1) * 3)


def test_a_timing_event_cuts_the_graph_where_it_is_recorded():
    with mode("fused"):
        torch_tpu.execution_mode.flush()
        start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
        x = torch.randn(64, 64, device="tpu")
        start.record()
        assert torch_tpu.execution_mode.pending_ops() == 0
        y = x @ x
        end.record()
        assert torch_tpu.execution_mode.pending_ops() == 0
        assert start.elapsed_time(end) >= 0
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-4)
