"""TF32 policy: torch.backends.tpu.matmul.allow_tf32 / torch.set_float32_matmul_precision and
torch.backends.tpu.conv.allow_tf32 choose the precision_config of float32 dot/conv programs
(HIGHEST = exact, PyTorch's default; DEFAULT = TF32-class when allowed). On the CPU plugin both
are exact float32, so the tests read the emitted StableHLO (TORCH_TPU_DUMP_HLO) and the
compilation cache counters, and check results against the CPU."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu  # noqa: F401

# Runs in a fresh process: TORCH_TPU_DUMP_HLO is read when the executor starts, and an empty
# cache directory makes every program compile (and be dumped) here.
_SCRIPT = textwrap.dedent(r"""
    import glob, json, os, sys
    import torch, torch_tpu

    dump = os.environ["TORCH_TPU_DUMP_HLO"]
    seen = set()

    def new_programs(marker):
        # Programs compiled since the last call that contain `marker`.
        out = []
        for path in sorted(glob.glob(os.path.join(dump, "*.mlir"))):
            if path in seen:
                continue
            seen.add(path)
            text = open(path).read()
            if marker in text:
                out.append(text)
        return out

    def compiles():
        return torch.tpu.compilation_cache_stats()["compiles"]

    def precisions(texts, marker):
        # Per program: whether each `marker` op carries HIGHEST precision.
        flags = []
        for t in texts:
            for line in t.splitlines():
                if marker in line:
                    flags.append("precision HIGHEST" in line)
        return flags

    def max_err(a, b):
        return float((a.cpu().double() - b.double()).abs().max())

    r = {"platform": torch.tpu.get_device_properties(0).platform}
    torch.manual_seed(0)
    a, b = torch.randn(32, 48), torch.randn(48, 16)
    ref = a @ b

    r["default_flag"] = torch.backends.tpu.matmul.allow_tf32
    r["default_precision"] = torch.get_float32_matmul_precision()
    out = a.to("tpu") @ b.to("tpu")
    torch.tpu.synchronize()
    r["default_dots"] = precisions(new_programs("stablehlo.dot_general"), "stablehlo.dot_general")
    r["default_err"] = max_err(out, ref)

    c0 = compiles()
    torch.backends.tpu.matmul.allow_tf32 = True
    r["flag_after_set"] = torch.backends.tpu.matmul.allow_tf32
    r["precision_after_set"] = torch.get_float32_matmul_precision()
    out = a.to("tpu") @ b.to("tpu")
    torch.tpu.synchronize()
    r["tf32_new_compiles"] = compiles() - c0
    r["tf32_dots"] = precisions(new_programs("stablehlo.dot_general"), "stablehlo.dot_general")
    r["tf32_err"] = max_err(out, ref)
    # Other dtypes keep exact products whatever the flag.
    a64, b64 = a.double(), b.double()
    out64 = a64.to("tpu") @ b64.to("tpu")
    torch.tpu.synchronize()
    r["f64_dots"] = precisions(new_programs("stablehlo.dot_general"), "stablehlo.dot_general")
    r["f64_err"] = max_err(out64, a64 @ b64)

    # Back to the default: the exact program again, from the cache (no new compile).
    torch.backends.tpu.matmul.allow_tf32 = False
    c0 = compiles()
    out = a.to("tpu") @ b.to("tpu")
    torch.tpu.synchronize()
    r["back_new_compiles"] = compiles() - c0
    r["back_err"] = max_err(out, ref)

    # torch.set_float32_matmul_precision maps onto the same switch, as on CUDA.
    torch.set_float32_matmul_precision("high")
    r["flag_high"] = torch.backends.tpu.matmul.allow_tf32
    lin = torch.nn.Linear(48, 16)
    lin_ref = lin(a)
    out = lin.to("tpu")(a.to("tpu"))
    torch.tpu.synchronize()
    r["high_linear_dots"] = precisions(new_programs("stablehlo.dot_general"), "stablehlo.dot_general")
    r["high_linear_err"] = max_err(out, lin_ref.detach())
    torch.set_float32_matmul_precision("medium")
    r["flag_medium"] = torch.backends.tpu.matmul.allow_tf32
    torch.set_float32_matmul_precision("highest")
    r["flag_highest"] = torch.backends.tpu.matmul.allow_tf32

    # Convolutions: torch_tpu's own switch, default exact.
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    cref = torch.nn.functional.conv2d(x, w)
    r["conv_default_flag"] = torch.backends.tpu.conv.allow_tf32
    out = torch.nn.functional.conv2d(x.to("tpu"), w.to("tpu"))
    torch.tpu.synchronize()
    r["conv_default"] = precisions(new_programs("stablehlo.convolution"), "stablehlo.convolution")
    torch.backends.tpu.conv.allow_tf32 = True
    c0 = compiles()
    out2 = torch.nn.functional.conv2d(x.to("tpu"), w.to("tpu"))
    torch.tpu.synchronize()
    r["conv_tf32_new_compiles"] = compiles() - c0
    r["conv_tf32"] = precisions(new_programs("stablehlo.convolution"), "stablehlo.convolution")
    r["conv_err"] = max(max_err(out, cref), max_err(out2, cref))
    torch.backends.tpu.conv.allow_tf32 = False
    r["conv_flag_reset"] = torch.backends.tpu.conv.allow_tf32

    # torch.compile(backend="tpu"): the flag at trace time picks the program.
    f = torch.compile(lambda u, v: torch.relu(u @ v), backend="tpu")
    at, bt = a.to("tpu"), b.to("tpu")
    o1 = f(at, bt)
    torch.tpu.synchronize()
    r["compiled_default"] = precisions(new_programs("stablehlo.dot_general"), "stablehlo.dot_general")
    torch.set_float32_matmul_precision("high")
    o2 = f(at, bt)
    torch.tpu.synchronize()
    r["compiled_tf32"] = precisions(new_programs("stablehlo.dot_general"), "stablehlo.dot_general")
    torch.set_float32_matmul_precision("highest")
    r["compiled_err"] = max(max_err(o1, torch.relu(ref)), max_err(o2, torch.relu(ref)))

    # PyTorch's newer per-backend API (last: mixing it with the legacy one makes
    # torch.get_float32_matmul_precision() raise for the rest of the process).
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    r["new_api_flag"] = torch.backends.tpu.matmul.allow_tf32
    c, d = torch.randn(32, 40), torch.randn(40, 16)
    out = c.to("tpu") @ d.to("tpu")
    torch.tpu.synchronize()
    r["new_api_dots"] = precisions(new_programs("stablehlo.dot_general"), "stablehlo.dot_general")
    r["new_api_err"] = max_err(out, c @ d)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    r["new_api_off"] = torch.backends.tpu.matmul.allow_tf32
    print("RESULT " + json.dumps(r))
""")


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tf32")
    (tmp / "dump").mkdir()
    env = dict(os.environ, TORCH_TPU_DUMP_HLO=str(tmp / "dump"),
               TORCH_TPU_CACHE_DIR=str(tmp / "cache"))
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def _tol(policy, tf32=False):
    # float32 products of 48 terms: exact programs agree closely with the CPU; TF32 products
    # (a GPU's DEFAULT precision; the CPU plugin stays exact) carry a 10-bit mantissa.
    return 5e-2 if tf32 and policy["platform"] != "cpu" else 1e-4


def test_default_is_pytorch_semantics_highest(policy):
    assert policy["default_flag"] is False
    assert policy["default_precision"] == "highest"
    assert policy["default_dots"] and all(policy["default_dots"])
    assert policy["default_err"] < _tol(policy)


def test_allow_tf32_changes_program_and_cache_key(policy):
    assert policy["flag_after_set"] is True
    # The flag is PyTorch's float32 matmul precision, like torch.backends.cuda.matmul.allow_tf32.
    assert policy["precision_after_set"] == "high"
    assert policy["tf32_new_compiles"] >= 1, "a new program (new cache key) must be compiled"
    assert policy["tf32_dots"] and not any(policy["tf32_dots"])
    assert policy["tf32_err"] < _tol(policy, tf32=True)


def test_other_dtypes_stay_exact(policy):
    assert policy["f64_dots"] and all(policy["f64_dots"])
    assert policy["f64_err"] < 1e-10


def test_switching_back_reuses_the_exact_program(policy):
    assert policy["back_new_compiles"] == 0
    assert policy["back_err"] < _tol(policy)


def test_set_float32_matmul_precision_maps_to_flag(policy):
    assert policy["flag_high"] is True
    assert policy["flag_medium"] is True
    assert policy["flag_highest"] is False
    assert policy["high_linear_dots"] and not any(policy["high_linear_dots"])
    assert policy["high_linear_err"] < _tol(policy, tf32=True)


def test_conv_flag(policy):
    assert policy["conv_default_flag"] is False
    assert policy["conv_default"] and all(policy["conv_default"])
    assert policy["conv_tf32_new_compiles"] >= 1
    assert policy["conv_tf32"] and not any(policy["conv_tf32"])
    assert policy["conv_err"] < _tol(policy, tf32=True)
    assert policy["conv_flag_reset"] is False


def test_compiled_graph_follows_the_flag(policy):
    # Dynamo guards on PyTorch's float32 matmul precision: flipping it recompiles the graph.
    assert policy["compiled_default"] and all(policy["compiled_default"])
    assert policy["compiled_tf32"] and not any(policy["compiled_tf32"])
    assert policy["compiled_err"] < _tol(policy, tf32=True)


def test_tpu_and_cuda_matmul_flags_are_one_switch():
    before = torch.get_float32_matmul_precision()
    try:
        torch.backends.tpu.matmul.allow_tf32 = True
        assert torch.backends.cuda.matmul.allow_tf32 is True
        torch.backends.cuda.matmul.allow_tf32 = False
        assert torch.backends.tpu.matmul.allow_tf32 is False
    finally:
        torch.set_float32_matmul_precision(before)


def test_per_backend_fp32_precision_api(policy):
    assert policy["new_api_flag"] is True
    assert policy["new_api_dots"] and not any(policy["new_api_dots"])
    assert policy["new_api_err"] < _tol(policy, tf32=True)
    assert policy["new_api_off"] is False
