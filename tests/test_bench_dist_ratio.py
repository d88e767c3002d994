"""benchmarks/dist_in_programs.py's speed ratio: per rank the median over rounds of the two
contenders' step times in the same round (they alternate within a round, so a host that drifts
between rounds does not move it), then the median over ranks - not the ratio of the two medians."""

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
