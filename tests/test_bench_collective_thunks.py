"""benchmarks/collective_thunks.py and dist_in_programs.py's collective time: XLA's per-thunk
trace of a program with collectives replayed on as many devices of jaxlib's CPU client, and the
wait for the last rank's launch read from a trace's device events."""

import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A rank's program with one collective, as TORCH_TPU_DUMP_HLO writes it in miniature: a product,
# then an all-gather over both replicas.
PROGRAM = """module @probe attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32} {
  func.func public @main(%arg0: tensor<64x64xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<128x64xf32>) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %1 = "stablehlo.all_gather"(%0) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<64x64xf32>) -> tensor<128x64xf32>
    return %0, %1 : tensor<64x64xf32>, tensor<128x64xf32>
  }
}
"""


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_counts_the_collectives_of_a_text():
    ct = load("collective_thunks")
    assert ct.count_collectives(PROGRAM) == 1
    assert ct.count_collectives(PROGRAM.replace('"stablehlo.all_gather"', '"stablehlo.all_reduce"') + PROGRAM) == 2
    assert ct.count_collectives(PROGRAM.split("%1 =")[0]) == 0
    assert ct.COLLECTIVE_THUNK.match("all-gather.5") and ct.COLLECTIVE_THUNK.match("reduce-scatter")
    assert ct.COLLECTIVE_THUNK.match("all-reduce-start.2") and not ct.COLLECTIVE_THUNK.match("Rendezvous")
    assert not ct.COLLECTIVE_THUNK.match("dot.3") and not ct.COLLECTIVE_THUNK.match("all-gather-fusion")


@pytest.mark.timing  # the traced thunks' time against the run's wall time
def test_replay_traces_the_collective_thunks(tmp_path):
    pytest.importorskip("jax", reason="jax is pinned in requirements-test.txt; the replay needs it")
    ct = load("collective_thunks")
    path = tmp_path / "probe.mlir"
    path.write_text(PROGRAM)
    result = ct.measure_in_child([str(path)], replicas=2, runs=5, timeout=300)[str(path)]
    assert result["collectives"] == 1
    assert result["run_ms"] > 0
    # The all-gather thunk was traced on both replicas, and took part of the run's time.
    assert 0 < result["collective_ms"] <= result["run_ms"]


def test_collective_time_adds_the_wait_for_the_last_rank(tmp_path, monkeypatch):
    # The script sets OMP_NUM_THREADS when unset and puts the repository's root first on sys.path
    # (where `import torch_tpu` would find the sources, not the build): both kept to this test -
    # processes spawned later inherit sys.path.
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    dip = load("dist_in_programs")
    # (launch id, device, start in us, program): launch 7 starts 60 us later on device 1, launch 8
    # 10 us later on device 0; launch 9 was cut off by the end of the trace (one part only).
    launches = [(7, 0, 100.0, "probe"), (7, 1, 160.0, "probe"), (8, 0, 300.0, "probe"), (8, 1, 290.0, "probe"),
                (9, 0, 500.0, "probe")]
    monkeypatch.delenv("TORCH_TPU_DUMP_HLO", raising=False)
    got = dip._collective_time(launches, ranks=2, steps=2)
    assert got["collective_thunks_ms"] is None  # no dump of the programs: no replay
    assert got["collective_wait_ms"] == pytest.approx((60 + 10) / 1e3 / 2 / 2)

    pytest.importorskip("jax", reason="jax is pinned in requirements-test.txt; the replay needs it")
    (tmp_path / "probe.mlir").write_text(PROGRAM)
    monkeypatch.setenv("TORCH_TPU_DUMP_HLO", str(tmp_path))
    got = dip._collective_time(launches, ranks=2, steps=2)
    assert got["collective_wait_ms"] == pytest.approx(0.0175)
    assert got["collective_thunks_ms"] > 0  # two complete launches of the program, over 2 steps
