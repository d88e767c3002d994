"""torch.tpu.profiler.TpuProfilerConfig: the original's profiler options on our trace - device
and host tracer levels, run_dir with a per-rank trace file, and clear errors for bad options."""

import json

import pytest
import torch
import torch_tpu  # noqa: F401
from torch.profiler import ProfilerActivity, profile

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
Config = None


@pytest.fixture(autouse=True)
def _config():
    global Config
    Config = torch.tpu.profiler.TpuProfilerConfig


def _work():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(32, 48, generator=g), torch.randn(48, 16, generator=g)
    out = (a.to("tpu") @ b.to("tpu")).relu().sum(0)
    return out.cpu(), (a @ b).relu().sum(0)


def _profiled(tmp_path, config):
    with profile(activities=ACTIVITIES, experimental_config=config) as prof:
        got, want = _work()
    torch.testing.assert_close(got, want)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    device = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    runtime = [e for e in events if str(e.get("name", "")).startswith(("tpu::compile", "tpu::cache_hit"))]
    return device, runtime


def test_default_config_traces_what_no_config_traces(tmp_path):
    plain_device, plain_runtime = _profiled(tmp_path, None)
    device, runtime = _profiled(tmp_path, Config())
    assert len(device) == len(plain_device) >= 3  # mm, relu, sum
    assert len(runtime) == len(plain_runtime) >= 3  # a compile or cache hit per program


def test_device_tracer_level_0_leaves_out_the_device_programs(tmp_path):
    device, runtime = _profiled(tmp_path, Config(device_tracer_level=0))
    assert device == []
    assert len(runtime) >= 3


def test_host_tracer_level_0_leaves_out_compiles_and_cache_hits(tmp_path):
    device, runtime = _profiled(tmp_path, Config(host_tracer_level=0))
    assert runtime == []
    assert len(device) >= 3


def test_run_dir_gets_the_tpu_trace_named_by_host_and_rank(tmp_path):
    config = Config(run_dir=tmp_path / "run", worker_rank="3")
    device, runtime = _profiled(tmp_path, config)
    path = config.trace_path()
    assert path.endswith("_3.tpu_trace.json") and path.startswith(str(tmp_path / "run"))
    events = json.loads(open(path).read())["traceEvents"]
    programs = [e for e in events if e.get("cat") == "tpu_program"]
    host = [e for e in events if e.get("cat") == "tpu_runtime"]
    assert len(programs) == len(device)
    assert len(host) == len(runtime)
    assert sorted(e["name"] for e in programs) == sorted(e["name"].removeprefix("tpu::op ") for e in device)
    assert all(e["dur"] >= 0 and e["args"]["device"] == 0 for e in programs)
    # Both traces name each execution's program the same way (the file TORCH_TPU_DUMP_HLO writes).
    assert all(len(e["args"]["hlo"]) == 32 for e in programs)
    assert sorted(e["args"]["hlo"] for e in programs) == sorted(e["args"]["hlo"] for e in device)
    assert any(e.get("ph") == "M" and e["args"]["name"] == "tpu:0" for e in events)


def test_run_dir_honours_the_levels(tmp_path):
    config = Config(run_dir=tmp_path, device_tracer_level=0)
    _profiled(tmp_path, config)
    events = json.loads(open(config.trace_path()).read())["traceEvents"]
    assert not [e for e in events if e.get("cat") == "tpu_program"]
    assert [e for e in events if e.get("cat") == "tpu_runtime"]


@pytest.mark.parametrize("kwargs, error, words", [
    ({"worker_rank": 3}, TypeError, "str(rank)"),
    ({"worker_rank": "a:b"}, ValueError, "cannot contain"),
    ({"host_tracer_level": -1}, ValueError, "non-negative int"),
    ({"device_tracer_level": "1"}, ValueError, "non-negative int"),
    ({"run_dir": "/tmp/a,b"}, ValueError, "cannot contain ','"),
    ({"experimental_options": {"run_dir": "/x"}}, ValueError, "keyword argument"),
    ({"experimental_options": {"a,b": 1}}, ValueError, "cannot contain"),
    ({"experimental_options": {"enable_hlo_proto": True}}, ValueError, "check_experimental_options=False"),
])
def test_bad_options_are_clear_errors(kwargs, error, words):
    with pytest.raises(error, match=None) as info:
        Config(**kwargs)
    assert words in str(info.value)


def test_unchecked_experimental_options_are_accepted_and_ignored(tmp_path):
    config = Config(experimental_options={"enable_hlo_proto": True, "name": "x"},
                    check_experimental_options=False)
    device, runtime = _profiled(tmp_path, config)
    assert len(device) >= 3 and len(runtime) >= 3


def test_public_name_and_stage():
    from torch.tpu.profiler import TpuProfilerConfig

    assert issubclass(TpuProfilerConfig, torch.profiler._ExperimentalConfig)
    assert torch.tpu.profiler.__tpu_api_stages__ == {"TpuProfilerConfig": "experimental"}
