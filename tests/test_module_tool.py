"""The ModuleInfo sweep (conformance/module_sweep.py) reports what it sees: planted wrong outputs,
gradients and buffer updates are mismatches with their maximum error, an op without a tpu
lowering is a fallback naming the op, a raising module is an error with its text, a module that
kills or hangs its worker is a crash, and samples cut by the time budget, failed sample
generation and random modules get their own categories."""

import json
import textwrap
import time

import pytest
import torch
from torch.testing._internal.common_modules import FunctionInput, ModuleInfo, ModuleInput

import torch_tpu

from conformance import module_report, module_sweep
from conformance.module_check import check_module
from conformance.module_random import check_dropout, check_rrelu


def _on_tpu(t):
    return t.device.type == "tpu"


def _inputs(count=2, shape=(4, 6)):
    def make(module_info, device, dtype, requires_grad, training, **kwargs):
        gen = torch.Generator().manual_seed(0)
        return [ModuleInput(constructor_input=FunctionInput(shape[-1]),
                            forward_input=FunctionInput(
                                torch.randn(shape, generator=gen).to(dtype).requires_grad_(requires_grad)))
                for _ in range(count)]

    return make


class Scale(torch.nn.Module):
    """A module with a parameter and a buffer; subclasses plant bugs on the tpu side."""

    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n))
        self.register_buffer("calls", torch.zeros(n))

    def forward(self, x):
        if self.training:
            self.calls.add_(1)
        return x * self.weight


class WrongOutput(Scale):
    def forward(self, x):
        out = super().forward(x)
        return out + 0.5 if _on_tpu(out) else out


class _WrongGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 3 if _on_tpu(g) else g


class WrongGradient(Scale):
    def forward(self, x):
        return super().forward(_WrongGrad.apply(x))


class WrongBuffer(Scale):
    def forward(self, x):
        out = super().forward(x)
        if _on_tpu(x) and self.training:
            self.calls.add_(1)
        return out


class Raises(Scale):
    def forward(self, x):
        if _on_tpu(x):
            raise ValueError("planted failure on tpu")
        return super().forward(x)


# An op with only a CPU kernel: on tpu it reaches the CPU fallback (disabled by the sweep).
_LIB = torch.library.Library("module_tool_test", "DEF")
_LIB.define("planted(Tensor x) -> Tensor")
_LIB.impl("planted", lambda x: x * 2, "CPU")
_LIB.impl("planted", torch.library.fallthrough_kernel, "Autograd")  # not differentiable: no warning


class FallsBack(Scale):
    def forward(self, x):
        return torch.ops.module_tool_test.planted(super().forward(x))


class Slow(Scale):
    def forward(self, x):
        time.sleep(0.2)
        return super().forward(x)


def _info(cls, inputs=None, train_and_eval_differ=False):
    return ModuleInfo(cls, module_inputs_func=inputs or _inputs(), train_and_eval_differ=train_and_eval_differ)


def _counts(result, dtype="float32", mode="train"):
    return result["dtypes"][dtype][mode]


def _message(result, dtype="float32", mode="train"):
    return result["dtypes"][dtype]["messages"][mode]


def test_correct_module_passes_every_run():
    """The control: the unpatched module passes train (with gradients and buffers), eval and the
    no_grad / inference_mode fast-path runs, with the fallback mode restored afterwards."""
    mode = torch_tpu.get_fallback_mode()
    result = check_module(_info(Scale, train_and_eval_differ=True), ["float32"])
    for run in ("train", "eval", "no_grad", "inference_mode"):
        c = _counts(result, mode=run)
        assert c["pass"] == 2 and sum(c.values()) == 2, result
    assert module_report.classify(result) == "pass"
    assert torch_tpu.get_fallback_mode() == mode


def test_planted_wrong_output_is_a_mismatch_with_max_error():
    result = check_module(_info(WrongOutput), ["float32"])
    for run in ("train", "no_grad", "inference_mode"):
        assert _counts(result, mode=run)["mismatch"] == 2, result
    msg = _message(result)
    assert msg.startswith("mismatch: output") and "max abs err 0.5" in msg, msg
    assert module_report.classify(result) == "mismatch"


def test_planted_wrong_gradient_is_a_mismatch():
    result = check_module(_info(WrongGradient), ["float32"])
    assert _counts(result)["mismatch"] == 2, result
    assert "gradient" in _message(result), result
    # Forward-only runs do not see the backward bug.
    assert _counts(result, mode="no_grad")["pass"] == 2, result


def test_planted_wrong_buffer_update_is_a_mismatch():
    result = check_module(_info(WrongBuffer), ["float32"])
    assert _counts(result)["mismatch"] == 2, result
    assert "buffer" in _message(result) and "calls" in _message(result), result


def test_op_without_lowering_is_a_fallback_naming_the_op():
    result = check_module(_info(FallsBack), ["float32"])
    assert _counts(result)["fallback"] == 2, result
    assert "module_tool_test::planted" in _message(result), result
    assert module_report.classify(result) == "fallback"


def test_raising_module_is_an_error_with_its_text():
    result = check_module(_info(Raises), ["float32"])
    assert _counts(result)["error"] == 2, result
    assert "ValueError: planted failure on tpu" in _message(result), result
    assert module_report.classify(result) == "error"


def test_time_budget_cuts_are_counted():
    result = check_module(_info(Slow, _inputs(count=4)), ["float32"], time_budget=0.3, modes=["train"])
    c = _counts(result)
    assert c["pass"] >= 1 and c["truncated"] >= 1 and c["pass"] + c["truncated"] == 4, result
    assert "truncated" in _message(result)
    assert module_report.classify(result) == "truncated"


def test_failing_sample_generation_is_reported():
    def broken(*args, **kwargs):
        raise RuntimeError("no samples for you")

    result = check_module(_info(Scale, broken), ["float32"])
    assert _counts(result) == {"inputs_failed": 1}, result
    assert "no samples for you" in _message(result)
    assert module_report.classify(result) == "inputs failed"


def test_bfloat16_runs_only_where_listed():
    info = _info(Scale)
    result = check_module(info, ["float32", "bfloat16"])
    assert "bfloat16" not in result["dtypes"]
    info.dtypes = (torch.float32, torch.bfloat16)
    result = check_module(info, ["float32", "bfloat16"])
    assert _counts(result, "bfloat16")["pass"] == 2, result


def test_random_modules_are_their_own_category():
    from conformance.module_extras import EXTRA_MODULE_DB

    dropout = next(i for i in EXTRA_MODULE_DB if i.name == "nn.Dropout")
    result = check_module(dropout, ["float32"], modes=["train", "eval"])
    train, evaluation = _counts(result, mode="train"), _counts(result, mode="eval")
    assert train["random"] > 0 and train["pass"] == 0 and train["mismatch"] == 0, result
    assert evaluation["pass"] > 0 and evaluation["random"] == 0, result  # eval: exact
    assert module_report.classify(result) == "random"


def test_dropout_statistics_accept_cpu_draws_and_reject_wrong_ones():
    torch.manual_seed(0)
    x = torch.randn(64, 64, requires_grad=True)
    m = torch.nn.Dropout(0.5).train()
    out = m(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert check_dropout("nn.Dropout", m, x, out, grad) is None
    # Right scaling but the wrong keep rate for p.
    too_many_kept = x.detach() * (torch.rand(x.shape) < 0.9) * 2
    assert "keep rate" in check_dropout("nn.Dropout", m, x, too_many_kept)
    # Kept elements not scaled by 1 / (1 - p).
    assert "neither kept" in check_dropout("nn.Dropout", m, x, out * 0.9)
    # A gradient that ignores the mask.
    assert "gradient" in check_dropout("nn.Dropout", m, x, out, torch.full_like(x, 2.0))
    # Channel dropout keeps or drops whole channels.
    m2 = torch.nn.Dropout2d(0.5).train()
    x2 = torch.randn(8, 32, 3, 3)
    assert check_dropout("nn.Dropout2d", m2, x2, m2(x2)) is None
    assert "units" in check_dropout("nn.Dropout2d", m2, x2, m(x2))
    # AlphaDropout's dropped value and scaling.
    m3 = torch.nn.AlphaDropout(0.3).train()
    assert check_dropout("nn.AlphaDropout", m3, x, m3(x)) is None
    assert check_dropout("nn.AlphaDropout", m3, x, x) is not None


def test_rrelu_statistics_accept_cpu_draws_and_reject_a_fixed_slope():
    torch.manual_seed(0)
    x = torch.randn(64, 64, requires_grad=True)
    m = torch.nn.RReLU(0.1, 0.3).train()
    out = m(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    assert check_rrelu(m, x, out, grad) is None
    assert "vary" in check_rrelu(m, x, m.eval()(x))  # eval's fixed slope is no train-mode draw
    assert "slopes in" in check_rrelu(m, x, torch.nn.functional.leaky_relu(x, 0.5))


PLUGIN = textwrap.dedent('''
    import os, time
    import torch
    from torch.testing._internal.common_modules import FunctionInput, ModuleInfo, ModuleInput

    def inputs(module_info, device, dtype, requires_grad, training, **kwargs):
        return [ModuleInput(constructor_input=FunctionInput(),
                            forward_input=FunctionInput(torch.ones(3, dtype=dtype, requires_grad=requires_grad)))]

    class PlantedAbort(torch.nn.Module):
        def forward(self, x):
            if x.device.type == "tpu":
                os.abort()
            return x * 2

    class PlantedHang(torch.nn.Module):
        def forward(self, x):
            if x.device.type == "tpu":
                time.sleep(3600)
            return x * 2

    class PlantedOk(torch.nn.Module):
        def forward(self, x):
            return x * 2

    MODULE_INFOS = [ModuleInfo(c, module_inputs_func=inputs) for c in (PlantedOk, PlantedAbort, PlantedHang)]
''')


def test_sweep_reports_crashes_and_hangs_and_goes_on(tmp_path):
    """End to end through the worker processes and the CLI: an aborting module and a hanging one
    are crashes, the sweep resumes in a new worker, and the JSON and markdown say so."""
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    out, md = tmp_path / "sweep.json", tmp_path / "coverage.md"
    # Two workers: the first runs PlantedOk and dies in PlantedAbort, the second hangs.
    module_sweep.main(["--plugin", str(plugin), "--modules", "PlantedAbort", "PlantedHang", "PlantedOk",
                       "--module-timeout", "8", "--modes", "train", "--json", str(out), "--markdown", str(md),
                       "--no-progress"])
    report = json.loads(out.read_text())
    mods = report["modules"]
    assert "SIGABRT" in mods["PlantedAbort"]["crash"], mods["PlantedAbort"]
    assert "hang" in mods["PlantedHang"]["crash"], mods["PlantedHang"]
    assert mods["PlantedOk"]["dtypes"]["float32"]["train"]["pass"] == 1, mods["PlantedOk"]
    assert report["totals"] == {"crash": 2, "pass": 1}, report["totals"]
    text = md.read_text()
    assert "modules whose worst result is `crash`: 2" in text
    assert "* `PlantedAbort` (crash): killed by SIGABRT" in text


def test_report_lists_every_category(tmp_path):
    results = {
        "A": check_module(_info(WrongOutput), ["float32"], modes=["train"]),
        "B": check_module(_info(FallsBack), ["float32"], modes=["train"]),
        "C": {"name": "C", "crash": "killed by SIGSEGV", "dtypes": {}},
        "D": check_module(_info(Scale), ["float32"], modes=["train"]),
    }
    totals, samples = module_report.summarize(results)
    assert totals == {"mismatch": 1, "fallback": 1, "crash": 1, "pass": 1}, totals
    assert samples["mismatch"] == 2 and samples["fallback"] == 2 and samples["pass"] == 2, samples
    path = tmp_path / "coverage.md"
    module_report.write_markdown(str(path), {"modules": results, "dtypes": ["float32"], "module_budget": 5})
    text = path.read_text()
    rows = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ") and " | " in line}
    assert "mismatch" in rows["A"] and "max abs err" in rows["A"] and "0/2 m2" in rows["A"]
    assert "module_tool_test::planted" in rows["B"] and "0/2 f2" in rows["B"]
    assert "killed by SIGSEGV" in rows["C"] and "| 2/2 |" in rows["D"]
    assert "* `A` (mismatch)" in text and "* `D`" not in text


def test_module_selection():
    names = list(module_sweep.all_module_infos())
    assert "nn.Linear" in names and "nn.Dropout" in names and len(names) == len(set(names))
    assert module_sweep.select(names, filters=["pool1d"]) == [n for n in names if "pool1d" in n.lower()]
    assert "nn.LazyConv1d" not in module_sweep.select(names, filters=["Conv1d"], excludes=["Lazy"])
    with pytest.raises(SystemExit, match="unknown modules: nn.Nope"):
        module_sweep.select(names, modules=["nn.Nope"])


class TakesTwo(torch.nn.Module):
    def forward(self, a, b):
        return a * b.exp()


def test_one_tensor_passed_twice_stays_one_tensor_on_tpu():
    """KLDivLoss's scalar samples pass the same tensor as input and target: its gradient is the
    sum of both uses on the CPU, so the tpu copy must be one tensor too."""

    def inputs(module_info, device, dtype, requires_grad, training, **kwargs):
        x = torch.randn(3, generator=torch.Generator().manual_seed(0)).requires_grad_(requires_grad)
        return [ModuleInput(constructor_input=FunctionInput(), forward_input=FunctionInput(x, x))]

    result = check_module(_info(TakesTwo, inputs), ["float32"], modes=["train"])
    assert _counts(result)["pass"] == 1, result
