"""Every script a person runs by hand (benchmarks, examples, conformance tools, peers' set-up
helpers) at least compiles under this interpreter: most of them are not run by CI (long sweeps
and benchmarks are separate commands), so a syntax error would otherwise land unnoticed."""

import glob
import os
import py_compile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(p for folder in ("benchmarks", "benchmarks/peers", "examples", "conformance", "scripts")
                 for p in glob.glob(os.path.join(ROOT, folder, "*.py")))


def test_there_are_scripts_to_check():
    assert any(p.endswith("fused_vs_strict.py") for p in SCRIPTS), SCRIPTS


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: os.path.relpath(p, ROOT))
def test_script_compiles(path, tmp_path):
    py_compile.compile(path, cfile=str(tmp_path / "out.pyc"), doraise=True)
