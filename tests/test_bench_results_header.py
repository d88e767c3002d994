"""The results files name the CPU they were measured on (benchmarks/_results.py): ratios against
PyTorch's CPU kernels move with its vector units, so a reader must be able to tell runs apart."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import _results  # noqa: E402


def _cpuinfo(key):
    with open("/proc/cpuinfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k.strip() == key:
                return v.strip()
    return None


def test_the_cpu_model_and_its_vector_units_are_named():
    model = _results.cpu_model()
    name, flags = _cpuinfo("model name"), (_cpuinfo("flags") or "").split()
    if name:
        assert model.startswith(name)
    for unit in ("avx2", "avx512f", "amx_tile"):
        assert (unit in model) == (unit in flags), (unit, model)


def test_written_results_carry_it(tmp_path, monkeypatch):
    monkeypatch.setattr(_results, "RESULTS", str(tmp_path))
    _results.write("probe", "Probe", {"x": 1}, [["a", "b"], [1, 2]])
    data = json.loads((tmp_path / "probe.json").read_text())
    assert data["environment"]["cpu"] == _results.cpu_model() and data["x"] == 1
    header = (tmp_path / "probe.md").read_text().splitlines()[2]
    assert f"({_results.cpu_model()})" in header and "| 1 | 2 |" in (tmp_path / "probe.md").read_text()
