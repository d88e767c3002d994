"""Differential fuzzing against the CPU (tests/fuzz_ops.py): random chains of 2-6 common ops on
random shapes, dtypes and layouts agree with the CPU in Strict and Fused Eager - values, dtypes,
shapes, view strides and exception classes. A fixed (derandomized) budget here; longer sweeps:
``python tests/fuzz_ops.py --examples 2000 [--mode fused] [--seed N]``."""

import pytest
import torch_tpu  # noqa: F401

import fuzz_ops


@pytest.mark.parametrize("mode, examples", [("strict", 80), ("fused", 40)])
def test_random_op_chains_agree_with_the_cpu(mode, examples):
    fuzz_ops.fuzz_test(examples, mode)()


def test_the_op_table_is_the_size_the_issue_asks_for():
    assert len(fuzz_ops.OPS) >= 100
    assert len(set(fuzz_ops.OP_NAMES)) == len(fuzz_ops.OPS)


def test_a_wrong_result_is_caught():
    """The harness itself: a tpu op that differs from the CPU must fail the chain."""
    import torch

    bad = fuzz_ops.Op("bad", 1, lambda a, r: a + 1 if a.device.type == "tpu" else a.clone())
    fuzz_ops.OPS.append(bad)
    try:
        with pytest.raises(fuzz_ops.Mismatch, match="values differ"):
            fuzz_ops.run_chain([torch.arange(4.0)], [("abs", 0, [0, 0]), ("bad", 0, [1, 1])])
    finally:
        fuzz_ops.OPS.remove(bad)
