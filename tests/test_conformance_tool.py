"""The OpInfo sweep (conformance/opinfo_sweep.py) reports what it sees: a planted wrong tpu result
is a mismatch for every dtype, the half-precision accuracy exemption covers only half-precision
outputs that are at least as close to a float64 reference as the CPU's, random ops and samples
cut by the time budget or lost to a failing sample_inputs get their own categories (random ops
compared as distributions: tests/test_conformance_random.py)."""

import json
import time

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import SampleInput

import torch_tpu  # noqa: F401  (registers the tpu device)

from conformance import opinfo_sweep as sweep
from conformance import random_compare

CLONE = next(o for o in op_db if sweep.entry_name(o) == "clone")


def _on_tpu(t):
    return isinstance(t, torch.Tensor) and t.device.type == "tpu"


def _corrupt(t):
    """A value that is plainly wrong for t's dtype: a planted bad lowering."""
    if t.dtype == torch.bool:
        return ~t
    return t + 1


class FakeOpInfo:
    """The parts of an OpInfo that check_op and run_sample use, around a plain function."""

    def __init__(self, name, fn, dtypes, samples, supports_autograd=False):
        self.name, self.variant_test_name = name, ""
        self._fn, self._dtypes, self._samples = fn, set(dtypes), samples
        self.supports_autograd = supports_autograd

    def supported_dtypes(self, device):
        return self._dtypes

    def sample_inputs(self, device, dtype, requires_grad=False):
        return self._samples(dtype, requires_grad)

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


def _samples(count=2, shape=(4, 5), **kwargs):
    def make(dtype, requires_grad):
        gen = torch.Generator().manual_seed(0)
        out = []
        for _ in range(count):
            if dtype == torch.bool:
                t = torch.rand(shape, generator=gen) > 0.5
            elif dtype.is_floating_point:
                t = (torch.rand(shape, generator=gen) * 4 + 1).to(dtype)
            else:
                t = torch.randint(-5, 5, shape, generator=gen).to(dtype)
            out.append(SampleInput(t, kwargs=dict(kwargs)))
        return out

    return make


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool", "bfloat16"])
def test_planted_wrong_lowering_is_a_mismatch(dtype, monkeypatch):
    real = CLONE.op

    def wrong_on_tpu(x, *args, **kwargs):
        out = real(x, *args, **kwargs)
        return _corrupt(out) if _on_tpu(out) else out

    monkeypatch.setattr(CLONE, "op", wrong_on_tpu)
    result = sweep.check_op(CLONE, [dtype], backward=False)
    forward = result["dtypes"][dtype]["forward"]
    samples = len(list(CLONE.sample_inputs("cpu", getattr(torch, dtype))))
    assert samples > 0
    assert forward["mismatch"] == samples and forward["pass"] == 0, result
    assert result["dtypes"][dtype]["messages"]["forward"].startswith("mismatch"), result
    assert sweep.classify_any(result) == "mismatch"


def test_unpatched_entry_passes_for_every_dtype():
    """The control for the planted mismatches: the same entry, unpatched, passes."""
    dtypes = ["float32", "float64", "int64", "bool", "bfloat16"]
    result = sweep.check_op(CLONE, dtypes, backward=False)
    for dtype in dtypes:
        forward = result["dtypes"][dtype]["forward"]
        assert forward["pass"] > 0 and forward["mismatch"] == forward["error"] == 0, result
    assert sweep.classify(result) == "pass"


def _cpu_half_inaccurate(x):
    """The CPU's half-precision result is off by 0.5 while tpu and the float64 reference are exact
    (as when the CPU accumulates in half precision)."""
    y = x.clone()
    if not _on_tpu(x) and y.dtype in (torch.bfloat16, torch.float16):
        y = y + 0.5
    return y


def test_half_precision_exemption_needs_tpu_at_least_as_accurate():
    # tpu exact, CPU off: the tpu bfloat16 result is closer to the float64 reference.
    op = FakeOpInfo("fake_half_ok", _cpu_half_inaccurate, [torch.bfloat16], _samples())
    fwd = sweep.check_op(op, ["bfloat16"], backward=False)["dtypes"]["bfloat16"]["forward"]
    assert fwd["pass"] == 2 and fwd["mismatch"] == 0, fwd

    # tpu off by more than the CPU: no exemption.
    def worse_on_tpu(x):
        y = x.clone()
        return y + 0.5 if _on_tpu(x) else y + 0.25

    op = FakeOpInfo("fake_half_worse", worse_on_tpu, [torch.bfloat16], _samples())
    fwd = sweep.check_op(op, ["bfloat16"], backward=False)["dtypes"]["bfloat16"]["forward"]
    assert fwd["mismatch"] == 2 and fwd["pass"] == 0, fwd


def test_exemption_never_covers_other_dtypes():
    """A float32 output of a bfloat16 op, wrong on tpu, next to a correct bfloat16 output: the
    old exemption skipped the float32 leaf and passed the sample."""

    def fn(x):
        extra = x.float() * 2
        if _on_tpu(x):
            extra = extra + 1
        return x.clone(), extra

    op = FakeOpInfo("fake_mixed", fn, [torch.bfloat16], _samples())
    result = sweep.check_op(op, ["bfloat16"], backward=False)
    fwd = result["dtypes"]["bfloat16"]["forward"]
    assert fwd["mismatch"] == 2 and fwd["pass"] == 0, result
    assert "torch.float32" in result["dtypes"]["bfloat16"]["messages"]["forward"]


def test_float32_closer_to_reference_is_still_a_mismatch():
    """CPU float32 off, tpu exact: float32 is compared with the CPU, never with a reference."""

    def fn(x):
        return x.clone() if _on_tpu(x) else x + 0.5

    op = FakeOpInfo("fake_f32", fn, [torch.float32], _samples())
    fwd = sweep.check_op(op, ["float32"], backward=False)["dtypes"]["float32"]["forward"]
    assert fwd["mismatch"] == 2 and fwd["pass"] == 0, fwd


def test_uninitialized_outputs_are_their_own_category(monkeypatch):
    monkeypatch.setattr(sweep, "RANDOM_OPS", sweep.RANDOM_OPS | {"fake_empty", "fake_random_shape"})
    monkeypatch.setattr(random_compare, "UNINITIALIZED_OPS", random_compare.UNINITIALIZED_OPS | {"fake_empty"})
    op = FakeOpInfo("fake_empty", torch.empty_like, [torch.float32], _samples(count=3))
    result = sweep.check_op(op, ["float32"], backward=False)
    fwd = result["dtypes"]["float32"]["forward"]
    assert fwd["random"] == 3 and fwd["pass"] == 0 and fwd["mismatch"] == 0, result
    assert sweep.classify(result) == "uninitialized: shape/dtype only"

    # A random op with the wrong shape on tpu is a mismatch before any distribution is drawn.
    def wrong_shape(x):
        out = torch.rand_like(x)
        return out[:1] if _on_tpu(x) else out

    op = FakeOpInfo("fake_random_shape", wrong_shape, [torch.float32], _samples())
    fwd = sweep.check_op(op, ["float32"], backward=False)["dtypes"]["float32"]["forward"]
    assert fwd["mismatch"] == 2 and fwd["random"] == 0, fwd


def test_time_budget_cuts_are_counted():
    def slow_clone(x):
        time.sleep(0.2)
        return x.clone()

    op = FakeOpInfo("fake_slow", slow_clone, [torch.float32], _samples(count=3))
    result = sweep.check_op(op, ["float32"], backward=False, time_budget=0.1)
    fwd = result["dtypes"]["float32"]["forward"]
    assert fwd["pass"] == 1 and fwd["truncated"] == 2, result
    assert "truncated" in result["dtypes"]["float32"]["messages"]["forward"]
    assert sweep.classify(result) == "truncated"


def test_failing_sample_inputs_are_reported():
    def broken(dtype, requires_grad):
        raise RuntimeError("no samples for you")

    op = FakeOpInfo("fake_broken", torch.clone, [torch.float32], broken)
    result = sweep.check_op(op, ["float32"], backward=False)
    assert result["dtypes"]["float32"]["forward"] == {"inputs_failed": 1}, result
    assert "no samples for you" in result["dtypes"]["float32"]["messages"]["forward"]
    assert sweep.classify(result) == "sample_inputs failed"


def test_report_shows_every_category(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "RANDOM_OPS", sweep.RANDOM_OPS | {"fake_random"})
    monkeypatch.setattr(random_compare, "UNINITIALIZED_OPS", random_compare.UNINITIALIZED_OPS | {"fake_random"})

    def broken(dtype, requires_grad):
        raise ValueError("broken sample_inputs")

    def slow_clone(x):
        time.sleep(0.2)
        return x.clone()

    ops = [
        FakeOpInfo("fake_ok", torch.clone, [torch.float32, torch.int64], _samples()),
        FakeOpInfo("fake_wrong_int", lambda x: _corrupt(x) if _on_tpu(x) else x.clone(),
                   [torch.float32, torch.int64], _samples()),
        FakeOpInfo("fake_random", torch.empty_like, [torch.float32], _samples()),
        FakeOpInfo("fake_broken", torch.clone, [torch.float32], broken),
        FakeOpInfo("fake_slow", slow_clone, [torch.float32], _samples(count=3)),
    ]
    results = {}
    for op in ops:
        budget = 0.1 if op.name == "fake_slow" else 60.0
        results[op.name] = sweep.check_op(op, ["float32", "int64"], backward=False, time_budget=budget)
    names = list(results)
    totals, any_totals, samples = sweep.summarize(results, names)
    # fake_wrong_int is also wrong in float32 (x + 1): a float32 mismatch.
    assert totals == {"pass": 1, "mismatch": 1, "uninitialized: shape/dtype only": 1,
                      "sample_inputs failed": 1, "truncated": 1}, totals
    assert any_totals["mismatch"] == 1 and any_totals["pass"] == 1, any_totals
    assert samples["random"] == 2 and samples["truncated"] == 2 and samples["inputs_failed"] == 1
    assert samples["mismatch"] == 4, samples  # float32 and int64, two samples each

    path = tmp_path / "coverage.md"
    sweep.write_markdown(str(path), results, names, ["float32", "int64"], totals, any_totals, samples)
    text = path.read_text()
    assert "| random | truncated | first problem |" in text
    for category in ("uninitialized: shape/dtype only", "sample_inputs failed", "truncated", "mismatch"):
        assert f"`{category}`: 1" in text, category
    row = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| fake_")}
    assert "inputs failed" in row["fake_broken"] and "broken sample_inputs" in row["fake_broken"]
    assert row["fake_random"].split(" | ")[-3] == "2"  # random column
    assert row["fake_slow"].split(" | ")[-2] == "2"  # truncated column
    assert "0/2 m2" in row["fake_wrong_int"]
    assert "| 0/0 r2 |" in row["fake_random"] and "| 1/1 t2 |" in row["fake_slow"]


def test_a_targeted_rerun_updates_the_full_report(tmp_path):
    """--update: rerun entries replace theirs in the full report, the totals are recomputed and
    the page names every entry rerun so far."""
    ops = [FakeOpInfo("fake_ok", torch.clone, [torch.float32], _samples()),
           FakeOpInfo("fake_wrong", lambda x: _corrupt(x) if _on_tpu(x) else x.clone(), [torch.float32], _samples())]
    results = {op.name: sweep.check_op(op, ["float32"], backward=False) for op in ops}
    totals, any_totals, samples = sweep.summarize(results, list(results))
    full = tmp_path / "full.json"
    full.write_text(json.dumps({"dtypes": ["float32"], "ops": results, "totals": totals,
                                "totals_any_dtype": any_totals, "samples": samples}))
    fixed = FakeOpInfo("fake_wrong", torch.clone, [torch.float32], _samples())
    page = tmp_path / "coverage.md"
    sweep.update_full_report(str(full), {"fake_wrong": sweep.check_op(fixed, ["float32"], backward=False)}, str(page))
    report = json.loads(full.read_text())
    assert report["totals"] == {"pass": 2} and report["rerun"] == ["fake_wrong"]
    assert "targeted rerun (`--update`) of 1 entries after fixes: `fake_wrong`." in page.read_text()
    with pytest.raises(SystemExit, match="not in"):
        sweep.update_full_report(str(full), {"fake_new": results["fake_ok"]}, str(page))


def test_inputs_are_copied_before_the_cpu_run_mutates_them():
    """An op that modifies its input in place: the tpu run gets the original values, not the
    ones the CPU run left behind."""

    def doubles_in_place(x):
        return x.mul_(2).clone()

    op = FakeOpInfo("fake_inplace", doubles_in_place, [torch.float32, torch.bfloat16], _samples())
    result = sweep.check_op(op, ["float32", "bfloat16"], backward=False)
    for dtype in ("float32", "bfloat16"):
        fwd = result["dtypes"][dtype]["forward"]
        assert fwd["pass"] == 2 and fwd["mismatch"] == 0, result


def _processed_samples(process):
    def make(dtype, requires_grad):
        out = _samples()(dtype, requires_grad)
        for s in out:
            s.output_process_fn_grad = process
        return out

    return make


@pytest.mark.parametrize("flip,process,expected", [
    (-1.0, torch.abs, "pass"),          # a sign convention the OpInfo declares arbitrary
    (-1.5, torch.abs, "mismatch"),      # a wrong value stays wrong after the processing
    (-1.0, lambda x: x, "mismatch"),    # no declared convention: the raw comparison stands
])
def test_output_process_fn_grad_is_applied_as_pytorch_does(flip, process, expected):
    """As PyTorch's test_compare_cpu: results that differ as they are are compared again after
    the sample's output_process_fn_grad (e.g. |eigenvectors| for linalg.eigh)."""
    op = FakeOpInfo("fake_signs", lambda x: x * flip if _on_tpu(x) else x.clone(), [torch.float32],
                    _processed_samples(process))
    fwd = sweep.check_op(op, ["float32"], backward=False)["dtypes"]["float32"]["forward"]
    assert fwd[expected] == 2, fwd
