"""The original TorchTPU's compilation controls on ours: torch.tpu.precision(Precision.X),
torch.tpu.allow_excess_precision and torch.tpu.compiler.custom_compiler_options.

Precision is read from the emitted StableHLO (TORCH_TPU_DUMP_HLO, in a fresh process so every
program compiles and is dumped there); compiler options are observed through an option whose
effect shows in the numbers: XLA:CPU's fast min/max (off by default, for PyTorch's NaN rules)
drops NaN from maximum when an options block turns it on. Every result is compared with the CPU."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu
from torch_tpu.dynamo import graph_runner
from helpers import assert_close

_PRECISION_SCRIPT = textwrap.dedent(r"""
    import glob, json, os
    import torch, torch_tpu
    from torch_tpu import execution_mode
    from torch_tpu.dynamo import graph_runner

    P = torch.tpu.Precision
    dump = os.environ["TORCH_TPU_DUMP_HLO"]
    seen = set()

    def configs(marker):
        # Per new program line with `marker`: its precision ("HIGHEST", "HIGH" or "DEFAULT").
        found = []
        for path in sorted(glob.glob(os.path.join(dump, "*.mlir"))):
            if path in seen:
                continue
            seen.add(path)
            for line in open(path):
                if marker in line:
                    found.append("HIGHEST" if "precision HIGHEST" in line else
                                 "HIGH" if "precision HIGH" in line else "DEFAULT")
        return sorted(set(found))

    def err(x, ref):
        return float((x.cpu().double() - ref.double()).abs().max())

    torch.manual_seed(0)
    a, b = torch.randn(16, 24), torch.randn(24, 8)
    ta, tb = a.to("tpu"), b.to("tpu")
    r = {"errs": []}
    r["default"] = configs("dot_general") if (ta @ tb).cpu() is not None else None
    for name in ("DEFAULT", "HIGH", "HIGHEST"):
        with torch.tpu.precision(P[name]):
            out = ta @ (tb + 1)
            r["current_" + name] = torch_tpu.tpu.precision_control.current_precision().name
        r["errs"].append(err(out, a @ (b + 1)))
        r["mm_" + name] = configs("dot_general")
    r["current_after"] = torch_tpu.tpu.precision_control.current_precision()
    # bfloat16 operands follow it too (default: HIGHEST for every floating dtype).
    with torch.tpu.precision(P.HIGH):
        out = ta.bfloat16() @ tb.bfloat16()
    r["bf16_high"] = configs("dot_general")
    r["errs"].append(err(out.float(), (a.bfloat16() @ b.bfloat16()).float()) / 10)
    # Convolutions.
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    with torch.tpu.precision(P.DEFAULT):
        out = torch.nn.functional.conv2d(x.to("tpu"), w.to("tpu"))
    r["conv_default"] = configs("stablehlo.convolution")
    r["errs"].append(err(out, torch.nn.functional.conv2d(x, w)))
    # It takes precedence over torch.set_float32_matmul_precision (whose "high" means DEFAULT).
    # (shapes of their own: each check compiles a new program)
    c, d = torch.randn(16, 20).to("tpu"), torch.randn(20, 8).to("tpu")
    torch.set_float32_matmul_precision("high")
    (c @ d).cpu()
    r["global_high"] = configs("dot_general")
    with torch.tpu.precision(P.HIGHEST):
        (c[:8] @ d).cpu()
    r["over_global"] = configs("dot_general")
    torch.set_float32_matmul_precision("highest")
    # The backward's matmuls (run by autograd's engine on its own thread) follow the block too.
    w = torch.randn(24, 6).to("tpu").requires_grad_()
    with torch.tpu.precision(P.HIGH):
        (ta @ w).square().sum().backward()
    r["backward"] = configs("dot_general")
    wr = torch.randn(24, 6)
    wr.copy_(w.detach().cpu()); wr.requires_grad_()
    (a @ wr).square().sum().backward()
    r["errs"].append(err(w.grad, wr.grad) / 100)
    # Fused Eager records the op with its precision.
    with execution_mode.mode("fused"):
        with torch.tpu.precision(P.HIGH):
            y = (ta * 3) @ tb
        z = (y + 1).cpu()
    r["fused"] = configs("dot_general")
    r["errs"].append(err(z, (a * 3) @ b + 1))
    # torch.compile: a compiled function called under another precision gets its own program.
    f = torch.compile(lambda u, v: torch.relu(u @ v), backend="tpu")
    f(ta, tb)
    r["compiled_first"] = configs("dot_general")
    with torch.tpu.precision(P.HIGH):
        o = f(ta, tb)
    r["compiled_high"] = configs("dot_general")
    r["errs"].append(err(o, torch.relu(a @ b)))
    f(ta, tb)
    r["compiled_stats"] = dict(graph_runner.stats)
    # Inside a compiled function the block is a graph break; the numbers stay right.
    def g(u):
        with torch.tpu.precision(P.HIGH):
            v = u @ u.t()
        return v + 1
    r["errs"].append(err(torch.compile(g, backend="tpu")(ta), a @ a.t() + 1))
    try:
        with torch.tpu.precision("HIGH"):
            pass
        r["bad_mode"] = None
    except ValueError as e:
        r["bad_mode"] = str(e)
    print("RESULT " + json.dumps(r))
""")


@pytest.fixture(scope="module")
def precision_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("precision")
    (tmp / "dump").mkdir()
    env = dict(os.environ, TORCH_TPU_DUMP_HLO=str(tmp / "dump"), TORCH_TPU_CACHE_DIR=str(tmp / "cache"))
    proc = subprocess.run([sys.executable, "-c", _PRECISION_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=300)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_precision_sets_the_stablehlo_precision_config(precision_run):
    r = precision_run
    assert r["default"] == ["HIGHEST"]
    assert r["mm_DEFAULT"] == ["DEFAULT"] and r["mm_HIGH"] == ["HIGH"]
    assert r["mm_HIGHEST"] == []  # the default program's text: the executable cache already has it
    assert [r["current_" + n] for n in ("DEFAULT", "HIGH", "HIGHEST")] == ["DEFAULT", "HIGH", "HIGHEST"]
    assert r["current_after"] is None
    assert r["bf16_high"] == ["HIGH"]
    assert r["conv_default"] == ["DEFAULT"]
    assert max(r["errs"]) < 1e-3, r["errs"]  # the CPU plugin computes float32 at every precision


def test_precision_applies_to_the_backward(precision_run):
    assert precision_run["backward"] == ["HIGH"]  # forward and both backward products


def test_precision_wins_over_set_float32_matmul_precision(precision_run):
    assert precision_run["global_high"] == ["DEFAULT"]
    assert precision_run["over_global"] == ["HIGHEST"]


def test_precision_in_fused_eager_and_compile(precision_run):
    r = precision_run
    assert r["fused"] == ["HIGH"]
    assert r["compiled_first"] == ["HIGHEST"]
    assert r["compiled_high"] == ["HIGH"]
    # The third call (default precision again) replays the first capture.
    assert r["compiled_stats"]["captures"] == 2 and r["compiled_stats"]["replays"] == 1


def test_precision_rejects_other_values(precision_run):
    assert "Precision.HIGHEST" in precision_run["bad_mode"]


_EXCESS_SCRIPT = textwrap.dedent(r"""
    import json, torch, torch_tpu
    r = {"initial": torch.tpu.allow_excess_precision}
    x = torch.randn(64).bfloat16()
    tx = x.to("tpu")
    compiles = lambda: torch.tpu.compilation_cache_stats()["compiles"]
    ref = (x * 3 + 1).float()
    r["err_default"] = float(((tx * 3 + 1).float().cpu() - ref).abs().max())
    torch.tpu.allow_excess_precision = False
    c0 = compiles()
    out = (tx * 3 + 1).float().cpu()
    r["new_compiles"] = compiles() - c0
    r["err_off"] = float((out - ref).abs().max())
    r["after_set"] = torch.tpu.allow_excess_precision
    try:
        torch.tpu.allow_excess_precision = "no"
    except TypeError as e:
        r["bad"] = str(e)
    print("RESULT " + json.dumps(r))
""")


def _run(script, **env):
    proc = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, **env), capture_output=True,
                          text=True, timeout=300)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_allow_excess_precision(tmp_path):
    r = _run(_EXCESS_SCRIPT, TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"), XLA_FLAGS="")
    assert r["initial"] is True  # XLA's default
    assert r["after_set"] is False
    assert r["new_compiles"] >= 1  # the setting is part of the programs' keys
    assert r["err_default"] == 0 and r["err_off"] == 0
    assert "must be a bool" in r["bad"]
    flagged = _run("import json, torch, torch_tpu\nprint('RESULT ' + json.dumps(torch.tpu.allow_excess_precision))",
                   XLA_FLAGS="--xla_allow_excess_precision=false")
    assert flagged is False


def _nan_max(ta, tb):
    return torch.maximum(ta, tb)


@pytest.fixture
def nan_pair():
    a = torch.tensor([float("nan"), 1.0, 2.0, -1.0])
    b = torch.tensor([1.0, float("nan"), 0.0, 3.0])
    return a, b, a.to("tpu"), b.to("tpu")


FAST_MIN_MAX = {"xla_cpu_enable_fast_min_max": True}


def test_compiler_options_reach_the_compiler_in_every_mode(nan_pair, fresh_dynamo):
    if torch.tpu.get_device_properties(0).platform != "cpu":
        pytest.skip("the observable option is XLA:CPU's fast min/max")
    a, b, ta, tb = nan_pair
    ref = torch.maximum(a, b)
    assert_close(torch.maximum(ta, tb), ref)  # PyTorch's NaN rule by default
    fast = torch.tensor([float("nan"), 1.0, 2.0, 3.0])  # what fast min/max returns
    with torch.tpu.compiler.custom_compiler_options(FAST_MIN_MAX):
        assert torch.tpu.compiler.custom_compiler_options is not None
        assert_close(torch.maximum(ta, tb), fast)
        with torch_tpu.execution_mode.mode("fused"):
            fused = torch.maximum(ta * 1, tb * 1) + 0
        assert_close(fused, fast)
    assert_close(torch.maximum(ta, tb), ref)  # outside the block: the default program again
    f = torch.compile(lambda x, y: torch.maximum(x, y) * 1, backend="tpu")
    assert_close(f(ta, tb), ref)
    with torch.tpu.compiler.custom_compiler_options(FAST_MIN_MAX):
        assert_close(f(ta, tb), fast)
    assert_close(f(ta, tb), ref)


def test_fused_work_recorded_inside_runs_with_the_options(nan_pair):
    if torch.tpu.get_device_properties(0).platform != "cpu":
        pytest.skip("the observable option is XLA:CPU's fast min/max")
    a, b, ta, tb = nan_pair
    with torch_tpu.execution_mode.mode("fused"):
        with torch.tpu.compiler.custom_compiler_options(FAST_MIN_MAX):
            inside = torch.maximum(ta + 0, tb + 0)
        outside = torch.maximum(ta + 0, tb + 0)
    assert_close(inside, torch.tensor([float("nan"), 1.0, 2.0, 3.0]))
    assert_close(outside, torch.maximum(a, b))


def test_compiler_options_nest_inner_wins_and_key_programs():
    from torch_tpu.tpu.compiler_options import current_compiler_options

    opts = torch.tpu.compiler.custom_compiler_options
    x = torch.randn(32, 32)
    tx = x.to("tpu")
    def compiles():  # programs built or loaded from the disk tier (not found in memory)
        stats = torch.tpu.compilation_cache_stats()
        return stats["compiles"] + stats["disk_loads"]

    (tx.tanh() * 5).cpu()
    with opts({"xla_optimization_level": "O1", "xla_cpu_enable_fast_math": False}):
        with opts({"xla_optimization_level": "O2"}):
            assert current_compiler_options() == {"xla_cpu_enable_fast_math": False, "xla_optimization_level": "O2"}
            c0 = compiles()
            out = (tx.tanh() * 5)
            assert_close(out, x.tanh() * 5)
            assert compiles() > c0  # its own program, not the one compiled outside
        assert current_compiler_options() == {"xla_cpu_enable_fast_math": False, "xla_optimization_level": "O1"}
    assert current_compiler_options() == {}
    c0 = compiles()
    assert_close(tx.tanh() * 5, x.tanh() * 5)
    assert compiles() == c0  # the program compiled before the blocks again


@pytest.mark.parametrize("options, words", [
    ({"not_a_real_flag": 1}, "not_a_real_flag"),
    ({"xla_cpu_enable_fast_math": "true"}, "xla_cpu_enable_fast_math"),
    ({"xla_memory_fitting_level": "O9"}, "xla_memory_fitting_level"),
])
def test_rejected_options_are_clear_errors(options, words):
    from torch_tpu.tpu.compiler_options import current_compiler_options

    with pytest.raises(ValueError, match=words):
        with torch.tpu.compiler.custom_compiler_options(options):
            pass
    assert current_compiler_options() == {}
    with pytest.raises(TypeError, match="dict"):
        with torch.tpu.compiler.custom_compiler_options([("a", 1)]):
            pass


def test_options_are_forbidden_inside_compiled_code(fresh_dynamo):
    def f(x):
        with torch.tpu.compiler.custom_compiler_options({"xla_optimization_level": "O1"}):
            return x + 1

    with pytest.raises(Exception, match="custom_compiler_options"):
        torch.compile(f, backend="tpu")(torch.ones(2, device="tpu"))
    graph_runner.reset_stats()
