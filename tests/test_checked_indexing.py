"""Checked indexing: out-of-range indices to index_select, embedding, gather, scatter*, x[idx] and
index_put_ raise PyTorch's error in Debug mode (at the call) and, with TORCH_TPU_CHECK_INDICES=1,
in Strict and Fused mode (at the next synchronization); the default Strict mode adds nothing.

The env-var settings run in subprocesses (the flag is read once per process)."""

import json
import os
import subprocess
import sys

import pytest
import torch

import torch_tpu
from torch_tpu import execution_mode

from helpers import assert_close


def _x(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 4, generator=g)


def _t(values):
    return torch.tensor(values, dtype=torch.long)


# name -> (op name the message carries, CPU exception type, fn(x, index) -> tensor, good, bad).
# Each fn builds everything from x and the index tensor, so the same call runs on either device.
CASES = {
    "index_select": ("index_select", IndexError, lambda x, i: x.index_select(0, i), _t([2, 0, 1]), _t([0, 3])),
    "index_select_neg": ("index_select", RuntimeError, lambda x, i: x.index_select(1, i), _t([3, 0]), _t([-1])),
    "index_select_3d": ("index_select", IndexError, lambda x, i: x.reshape(3, 2, 2).index_select(2, i), _t([1, 0, 1]),
                        _t([2])),
    "embedding": ("embedding", IndexError, lambda x, i: torch.nn.functional.embedding(i, x), _t([[2, 0], [1, 1]]),
                  _t([[0, 7]])),
    "gather": ("gather", RuntimeError, lambda x, i: x.gather(0, i), _t([[0, 2, 1, 0]]), _t([[0, 3, 0, 0]])),
    "gather_neg": ("gather", RuntimeError, lambda x, i: x.gather(1, i), _t([[3], [0], [1]]), _t([[-1], [0], [0]])),
    "scatter": ("scatter", RuntimeError, lambda x, i: x.clone().scatter_(0, i, 2.5), _t([[0, 2, 1, 0]]),
                _t([[0, 5, 0, 0]])),
    "scatter_src": ("scatter", RuntimeError, lambda x, i: x.clone().scatter(1, i, x[:, :2] * 3), _t([[1, 0], [3, 2], [0, 1]]),
                    _t([[1, 0], [4, 2], [0, 1]])),
    "scatter_add": ("scatter_add", RuntimeError, lambda x, i: x.clone().scatter_add_(0, i, x[:1]), _t([[2, 2, 1, 0]]),
                    _t([[2, 2, 3, 0]])),
    "scatter_reduce": ("scatter_reduce", RuntimeError,
                       lambda x, i: x.clone().scatter_reduce_(0, i, x[:1] * 5, "amax", include_self=True),
                       _t([[2, 2, 1, 0]]), _t([[-1, 2, 1, 0]])),
    "index": ("index", IndexError, lambda x, i: x[i], _t([2, -1, -3, 0]), _t([0, 3])),
    "index_neg": ("index", IndexError, lambda x, i: x[:, i], _t([-4, 3]), _t([-5])),
    "index_two": ("index", IndexError, lambda x, i: x[i, i], _t([0, -2, 2]), _t([0, 3])),
    "index_put": ("index_put_", IndexError, lambda x, i: x.clone().index_put_((i,), x[0] * 2), _t([-1, 0]),
                  _t([3])),
    "index_put_acc": ("index_put_", IndexError,
                      lambda x, i: x.clone().index_put_((i,), x[0] * 2, accumulate=True), _t([1, 1, -3]),
                      _t([-4])),
}


def _on_tpu(name, which):
    _, _, fn, good, bad = CASES[name]
    index = good if which == "good" else bad
    return fn(_x().to("tpu"), index.to("tpu"))


def _cpu_error_type(name):
    _, _, fn, _, bad = CASES[name]
    try:
        fn(_x(), bad)
    except Exception as e:  # noqa: BLE001 - the CPU's exception type is what we compare with
        return type(e)
    raise AssertionError(f"{name}: the CPU accepted the bad index")


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_raises_the_declared_type(name):
    assert _cpu_error_type(name) is CASES[name][1]


@pytest.mark.parametrize("name", sorted(CASES))
def test_debug_mode_raises_at_the_call(name):
    op, error, fn, good, bad = CASES[name]
    with execution_mode.mode("debug"):
        with pytest.raises(error) as info:
            fn(_x().to("tpu"), bad.to("tpu"))
        assert f"{op}()" in str(info.value) and "size" in str(info.value)
        assert_close(_on_tpu(name, "good"), fn(_x(), good))
    torch.tpu.synchronize()  # nothing left pending


@pytest.mark.parametrize("name", sorted(CASES))
def test_default_strict_in_range_matches_cpu(name):
    _, _, fn, good, _ = CASES[name]
    assert_close(_on_tpu(name, "good"), fn(_x(), good))


def test_default_strict_bad_index_unchecked_and_no_extra_program():
    # Documented behaviour without TORCH_TPU_CHECK_INDICES: XLA clamps/drops, nothing raises,
    # and the op runs exactly the programs an in-range call runs (no check program, no check).
    assert execution_mode.get_mode() == execution_mode.EagerMode.STRICT
    for name in sorted(CASES):
        good_run = _on_tpu(name, "good")  # warm the op's programs
        torch.tpu.synchronize()
        before = torch.tpu.compilation_cache_stats()["executions"]
        good_run = _on_tpu(name, "good")
        torch.tpu.synchronize()
        good_cost = torch.tpu.compilation_cache_stats()["executions"] - before
        checks_before = torch_tpu._C._deferred_check_stats(-1)
        before = torch.tpu.compilation_cache_stats()["executions"]
        bad_run = _on_tpu(name, "bad")
        torch.tpu.synchronize()
        bad_run.cpu()
        bad_cost = torch.tpu.compilation_cache_stats()["executions"] - before
        assert bad_cost == good_cost, (name, bad_cost, good_cost)
        assert torch_tpu._C._deferred_check_stats(-1) == checks_before, name
        del good_run


_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch, torch_tpu
import test_checked_indexing as t
out = {}
for name in sorted(t.CASES):
    op, _, fn, good, bad = t.CASES[name]
    res = {}
    try:
        y = fn(t._x().to("tpu"), bad.to("tpu"))
        res["at_call"] = None
    except Exception as e:
        res["at_call"] = repr(e)
        out[name] = res
        continue
    try:
        if name.endswith("_sync"):
            torch.tpu.synchronize()
        else:
            y.cpu()
        res["at_sync"] = None
    except Exception as e:
        res["at_sync"] = [type(e).__name__, str(e)]
    # A failure is consumed when raised: later work runs, and in-range calls match the CPU.
    try:
        z = fn(t._x().to("tpu"), good.to("tpu"))
        torch.tpu.synchronize()
        res["good_equal"] = bool(torch.equal(z.cpu(), fn(t._x(), good)))
    except Exception as e:
        res["good_equal"] = repr(e)
    out[name] = res
# A bad index followed by torch.tpu.synchronize() (not a read of the result).
x = t._x().to("tpu")
x.index_select(0, torch.tensor([9], device="tpu"))
try:
    torch.tpu.synchronize()
    out["__synchronize__"] = None
except Exception as e:
    out["__synchronize__"] = [type(e).__name__, str(e)]
print("RESULT " + json.dumps(out))
"""


@pytest.mark.parametrize("fused", [False, True], ids=["strict", "fused"])
def test_env_checks_raise_at_next_synchronization(fused):
    env = dict(os.environ, TORCH_TPU_CHECK_INDICES="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1")
    env.pop("TPU_LAUNCH_BLOCKING", None)
    env.pop("TORCH_TPU_DEFER_AND_FUSE", None)
    if fused:
        env["TORCH_TPU_DEFER_AND_FUSE"] = "1"
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", _CHILD, here], env=env, capture_output=True, text=True,
                          timeout=240)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT "):])
    for name, (op, _, _, _, _) in CASES.items():
        res = out[name]
        assert res["at_call"] is None, (name, res)
        assert res["at_sync"] is not None, (name, "a bad index was not reported")
        kind, message = res["at_sync"]
        assert kind == "RuntimeError" and f"{op}()" in message and "TORCH_TPU_CHECK_INDICES" in message, (name, res)
        assert res["good_equal"] is True, (name, res)
    kind, message = out["__synchronize__"]
    assert kind == "RuntimeError" and "index_select()" in message


def test_debug_edge_cases_match_cpu():
    # Empty and int32 indices, a 0-dim self and a boolean mask run checked without a false alarm.
    x = _x()
    cases = [
        lambda t: t.index_select(0, torch.tensor([], dtype=torch.long, device=t.device)),
        lambda t: t.index_select(0, torch.tensor([2, -0, 1], dtype=torch.int32, device=t.device)),
        lambda t: t[0, 0].gather(0, torch.tensor(0, device=t.device)),
        lambda t: t[0, 0].clone().scatter_(0, torch.tensor(0, device=t.device), 3.0),
        lambda t: t[t > 0],
        lambda t: t[torch.tensor([True, False, True], device=t.device), torch.tensor([-1, 0], device=t.device)],
    ]
    with execution_mode.mode("debug"):
        for fn in cases:
            assert_close(fn(x.to("tpu")), fn(x))
