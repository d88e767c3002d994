"""benchmarks/dist_in_programs.py's speed ratio: per rank the median over rounds of the two
contenders' step times in the same round (they alternate within a round, so a host that drifts
between rounds does not move it), then the median over ranks - not the ratio of the two medians;
and the loss reads of a round's steps."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load():
    spec = importlib.util.spec_from_file_location("dist_in_programs", os.path.join(ROOT, "benchmarks",
                                                                                   "dist_in_programs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_speed_is_the_median_of_same_round_ratios():
    dip = load()
    out = [  # per rank: each contender's step seconds, round by round
        {"eager cut": {"round_step_s": [10.0, 30.0, 12.0]}, "in programs": {"round_step_s": [5.0, 20.0, 10.0]}},
        {"eager cut": {"round_step_s": [10.0, 10.0, 10.0]}, "in programs": {"round_step_s": [10.0, 5.0, 5.0]}},
    ]
    got = dip.speed_vs_eager_cut(out)
    # rank 0: rounds 2.0, 1.5, 1.2 -> 1.5 (its medians' ratio would be 12 / 10 = 1.2); rank 1: 2.0
    assert got["in programs"] == pytest.approx(1.75)
    assert got["eager cut"] == 1.0


@pytest.mark.parametrize("n,read_every,reads", [(10, 1, 10), (10, 10, 1), (10, 4, 3), (3, 10, 1)])
def test_steps_read_the_loss_at_the_pattern_and_after_the_last(n, read_every, reads):
    """run_steps reads the loss on the host every `read_every` steps and after the round's last
    step (once, not twice, when the last is a pattern step too)."""
    dip = load()
    read_at = []

    class Loss:
        def __init__(self, step):
            self.step = step

        def item(self):
            read_at.append(self.step)
            return float(self.step)

    calls = []

    def step():
        calls.append(len(calls) + 1)
        return Loss(len(calls))

    assert dip.run_steps(step, n, read_every) == float(n)
    assert len(calls) == n and len(read_at) == reads
    assert read_at == [s for s in range(1, n + 1) if s % read_every == 0 and s < n] + [n]
