"""benchmarks/compile_step.py's jax_jit_plugin: JAX's Llama step run on the PJRT plugin torch_tpu
drives (jax_plugin.py), so that JAX's program and ours are compared on one build of XLA. It must
really run there, and compute what the step computes on jaxlib's own CPU client and in PyTorch."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")


def test_jax_step_on_the_plugin_runs_there_and_matches():
    pytest.importorskip("jax", reason="jax is pinned in requirements-test.txt; the benchmark needs it")
    # A child process: JAX reads its plugins once, when its backends start (other tests in this
    # process may have started them already).
    code = (
        "import json, sys; sys.path.insert(0, %r); sys.path.insert(0, %r)\n"
        "import compile_step as cs\n"
        "on_plugin = cs.make('llama_train_small', 'jax_jit_plugin')\n"  # first: registers the plugin
        "on_jaxlib = cs.make('llama_train_small', 'jax_jit')\n"
        "eager = cs.make('llama_train_small', 'eager_cpu')\n"
        "param = next(iter(on_plugin.arguments()[0].values()))\n"
        "print(json.dumps({'platform_version': param.devices().pop().client.platform_version,\n"
        "                  'plugin': [on_plugin() for _ in range(3)], 'jaxlib': [on_jaxlib() for _ in range(3)],\n"
        "                  'eager': [eager() for _ in range(3)]}))\n" % (BENCH, ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # jaxlib's own client reports its build ("cpu"); a plugin goes through the PJRT C API.
    assert "PJRT C API" in got["platform_version"]
    assert got["plugin"][0] != got["plugin"][2]  # the steps train
    for name in ("plugin", "jaxlib"):
        for a, b in zip(got[name], got["eager"]):
            assert a == pytest.approx(b, rel=1e-4), (name, got)
