"""benchmarks/xla_builds.py: one program run by the plugin's XLA build and by jaxlib's, with the
same inputs and agreeing outputs; the helpers that prepare a dumped program for both."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "xla_builds.py")

# What TORCH_TPU_DUMP_HLO writes for a compiled graph, in miniature: a donated input, an integer
# input, a product and a sum.
PROGRAM = """module @probe {
  func.func public @main(%arg0: tensor<8x16xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<16x4xf32>, %arg2: tensor<8xi64>) -> (tensor<8x16xf32>, tensor<8x4xf32>, tensor<8xi64>) {
    %0 = stablehlo.add %arg0, %arg0 : tensor<8x16xf32>
    %1 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %2 = stablehlo.add %arg2, %arg2 : tensor<8xi64>
    return %0, %1, %2 : tensor<8x16xf32>, tensor<8x4xf32>, tensor<8xi64>
  }
}
"""


def load_script():
    spec = importlib.util.spec_from_file_location("xla_builds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_donation_is_removed_and_inputs_follow_the_signature():
    xb = load_script()
    text = xb.DONATION.sub("", PROGRAM)
    assert "aliasing_output" not in text and "%arg0: tensor<8x16xf32> ," in text
    args = xb.random_arguments(text, np.random.default_rng(0))
    assert [(a.shape, str(a.dtype)) for a in args] == [((8, 16), "float32"), ((16, 4), "float32"), ((8,), "int64")]
    assert np.abs(args[0]).max() > 0 and not args[2].any()  # random floats, zero (valid) indices


def test_outputs_compare_by_kind():
    xb = load_script()
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    assert xb._close(a, a + 1e-6)
    assert not xb._close(a, a + 0.1)
    assert not xb._close(a, a.reshape(4, 3))
    assert xb._close(np.arange(4), np.arange(4)) and not xb._close(np.arange(4), np.arange(4) + 1)


def test_both_builds_run_the_program_and_agree(tmp_path):
    pytest.importorskip("jax", reason="jax is pinned in requirements-test.txt; the benchmark needs it")
    # A child process: registering the plugin with JAX would change the platform of later JAX
    # tests in this one.
    code = (
        "import json, sys; sys.path.insert(0, %r); sys.path.insert(0, %r)\n"
        "import xla_builds as xb\n"
        "from torch_tpu._plugin import default_plugin_path\n"
        "text = open(%r).read()\n"
        "print(json.dumps(xb._time_programs([text], default_plugin_path('cpu'), rounds=2, runs=2)))\n"
        % (os.path.dirname(SCRIPT), ROOT, str(tmp_path / "p.mlir")))
    (tmp_path / "p.mlir").write_text(PROGRAM)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    ((plugin_s, jaxlib_s, agree),) = json.loads(out.stdout.strip().splitlines()[-1])
    assert plugin_s > 0 and jaxlib_s > 0
    assert agree is True
