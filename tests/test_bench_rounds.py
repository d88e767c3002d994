"""A timed round of the benchmarks ends when the device has run all of it (benchmarks/_rounds.py):
a loss read waits only for the loss's own program, and the backward and optimizer launched after
it had been left to the next round - the next contender's, which paid for them. The zoo's medium
models were timed up to ~2x too fast that way, and Inductor after them too slow."""

import os
import sys

import pytest
import torch

import torch_tpu  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import _rounds  # noqa: E402
import zoo  # noqa: E402


@pytest.fixture
def syncs(monkeypatch):
    calls = []
    real = torch.tpu.synchronize

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.tpu, "synchronize", counting)
    return calls


def test_waits_on_the_tpu_only(syncs):
    _rounds.wait_for_device("cpu")
    assert syncs == []
    _rounds.wait_for_device("tpu")
    assert len(syncs) == 1


@pytest.mark.parametrize("label,waits,reads", [("strict r10", 1, 1), ("compiled", 1, 3), ("cpu eager", 0, 3)])
def test_a_zoo_round_ends_after_the_device_ran_it(syncs, label, waits, reads):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    contender = zoo.Contender(label, model, (torch.randn(4, 8),), torch.tensor([0, 2, 1, 0]),
                              torch.nn.functional.cross_entropy)
    contender.run(3)
    assert len(syncs) == waits
    assert len(contender.losses) == reads  # r10: once, after the last of the 3 steps; r1: each


def test_dist_rounds_end_after_the_device_ran_them(syncs):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import dist_in_programs

    assert dist_in_programs.run_steps(lambda: torch.ones((), device="tpu"), 3, 10) == 1.0
    assert len(syncs) == 1
