"""A trace names each execution's program: its device event carries `hlo`, the name of the
StableHLO text TORCH_TPU_DUMP_HLO writes (every program the process loads, compiled or read from
the disk cache), and a program with collectives carries the `launch_id` every rank's part of the
launch shares."""

import json
import os
import subprocess
import sys
import textwrap

import torch
import torch_tpu  # noqa: F401
from torch.profiler import ProfilerActivity, profile

from dist_harness import run_threads

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _device_events(prof, tmp_path):
    path = str(tmp_path / "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]


# A child process (the dump directory is read when the program cache starts): one op, profiled;
# prints the programs its device events name.
_CHILD = textwrap.dedent("""
    import json, sys, torch, torch_tpu
    from torch.profiler import ProfilerActivity, profile
    x = torch.arange(12.0).reshape(3, 4).to("tpu")
    with profile(activities=[ProfilerActivity.PrivateUse1]) as prof:
        y = (x * 3).sum(0)
        assert torch.equal(y.cpu(), (torch.arange(12.0).reshape(3, 4) * 3).sum(0))
    prof.export_chrome_trace(sys.argv[1])
    events = json.load(open(sys.argv[1]))["traceEvents"]
    print(json.dumps(sorted({e["args"].get("hlo", "") for e in events if e.get("cat") == "kernel"})))
""")


def _run_child(tmp_path, cache, dump, tag):
    os.makedirs(dump, exist_ok=True)
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache), TORCH_TPU_DUMP_HLO=str(dump))
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / f"{tag}.json")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_events_name_the_dumped_program_compiled_or_from_disk(tmp_path):
    cache = tmp_path / "cache"
    compiled = _run_child(tmp_path, cache, tmp_path / "dump1", "first")
    assert compiled and all(len(name) == 32 for name in compiled), compiled
    for name in compiled:
        assert "func.func" in (tmp_path / "dump1" / f"{name}.mlir").read_text()
    # A second process reads the same programs from the disk cache: they are dumped as well, under
    # the same names.
    loaded = _run_child(tmp_path, cache, tmp_path / "dump2", "second")
    assert loaded == compiled
    for name in loaded:
        assert (tmp_path / "dump2" / f"{name}.mlir").read_text() == (tmp_path / "dump1" / f"{name}.mlir").read_text()


def _collective_step(rank, world_size):
    import torch.distributed as dist
    from torch.tpu.distributed import spmd_safe

    x = torch.full((4, 4), float(rank + 1), device="tpu")
    with spmd_safe():
        y = x * 2
        dist.all_reduce(y)
        z = y + 1
    return z.cpu()


def test_collective_launch_id_is_shared_by_every_rank(tmp_path):
    with torch_tpu.execution_mode.mode("fused"), profile(activities=ACTIVITIES) as prof:
        results = run_threads(_collective_step, 2)
    want = torch.full((4, 4), 2.0 * (1 + 2) + 1)
    for got in results:
        torch.testing.assert_close(got, want)
    events = _device_events(prof, tmp_path)
    with_collectives = [e for e in events if "launch_id" in e["args"]]
    assert {e["args"]["device"] for e in with_collectives} == {0, 1}, events
    by_launch = {}
    for e in with_collectives:
        by_launch.setdefault(e["args"]["launch_id"], []).append(e)
    for parts in by_launch.values():  # one part per rank, the same program
        assert sorted(e["args"]["device"] for e in parts) == [0, 1]
        assert len({e["args"]["hlo"] for e in parts}) == 1 and parts[0]["args"]["hlo"]
    # The rest (the inputs' copies, the reads) hold no collective.
    assert all(e["args"]["kind"] == "fused_graph" for e in with_collectives)
